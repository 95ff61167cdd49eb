#!/bin/bash
# session 33 call 5 (55d6c14: the Gumbel-max draw): sample.py at its defaults (temperature 0.8, top_k 200) on GPT-2 124M
# checkpoints of six variants (one training iteration each, block 1024), greedy beside; the sampler's pieces timed again
# (diag_sample.py); bench_decode's generate rows sampled and greedy (3,500-token prompt); the CUDA tests of the sampler.
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 150 python3 -m pytest -v -rs tests/test_decode.py -k "sample_next or graph_sampling or graph_replays_the_eager" > $D/tests.txt 2>&1
python3 -m data.shakespeare.prepare > /dev/null 2>&1
declare -A CFG=([mha]=shakespeare_mha [gqa4]=shakespeare_gqa4 [mqa]=shakespeare_gqa1 [mla_shared128]=shakespeare_mla_shared128 \
  [tucker_8_64_64]=shakespeare_tucker_8_64_64 [tucker_shared_8_64_64]=shakespeare_tucker_shared_8_64_64)
V="mha gqa4 mqa mla_shared128 tucker_8_64_64 tucker_shared_8_64_64"
for v in $V; do
  timeout 60 python3 train.py config/${CFG[$v]}.py --max_iters=1 --eval_interval=1 --always_save_checkpoint=True \
    --block_size=1024 --batch_size=4 --eval_full_val=False --eval_iters=1 --out_dir=out-ck-$v > $D/ck_$v.txt 2>&1
done
S="--num_samples=3 --max_new_tokens=500"
for v in $V; do
  timeout 60 python3 sample.py --out_dir=out-ck-$v $S > $D/new_$v.out 2> $D/new_$v.err
done
timeout 60 python3 results/bench/session33/diag_sample.py $D/diag_sample.json > $D/diag_sample.txt 2>&1
for v in mha tucker_8_64_64 tucker_shared_8_64_64; do
  timeout 60 python3 sample.py --out_dir=out-ck-$v $S --temperature=0 > $D/greedy_$v.out 2> $D/greedy_$v.err
done
for t in 0.8 0; do
  timeout 150 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph --batches 1 \
    --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph,mega --temperature $t --iters 50 \
    --out_dir $D --name generate_t$t > $D/generate_t$t.log 2>&1
done
(cd $OUT && tar czf c5.tgz c5)

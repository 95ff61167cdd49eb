#!/bin/bash
# session 34 call 5 (fused_sample's fixes after call 4: the grid's axes, top_k 1, the block by batch): the CUDA tests
# of fused_sample and of sampling / graphs in test_decode.py; bench_sample at batch 1-32 with the block swept;
# bench_decode's generate rows sampled and greedy; sample.py at its defaults for the GQA-4 and MQA checkpoints.
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 120 python3 -m pytest -v -rs tests/test_fused_sample.py > $D/test_fused_sample.txt 2>&1
timeout 90 python3 -m scripts.bench_sample --out_dir $D --batches 1,2,4,8,32 --sweep "BLOCK=256,512,1024,2048,4096" > $D/bench_sample.log 2>&1
timeout 100 python3 -m pytest -v -rs tests/test_decode.py -k "sample or generat or graph_sampling" > $D/test_decode.txt 2>&1
for t in 0.8 0; do
  timeout 100 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph --batches 1 \
    --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph --temperature $t --iters 50 \
    --out_dir $D --name generate_t$t > $D/generate_t$t.log 2>&1
done
python3 -m data.shakespeare.prepare > /dev/null 2>&1
declare -A CFG=([gqa4]=shakespeare_gqa4 [mqa]=shakespeare_gqa1)
for v in gqa4 mqa; do
  timeout 50 python3 train.py config/${CFG[$v]}.py --max_iters=1 --eval_interval=1 --always_save_checkpoint=True \
    --block_size=1024 --batch_size=4 --eval_full_val=False --eval_iters=1 --out_dir=out-ck-$v > $D/ck_$v.txt 2>&1
  timeout 50 python3 sample.py --out_dir=out-ck-$v --num_samples=3 --max_new_tokens=500 > $D/sample_$v.out 2> $D/sample_$v.err
done
rm -rf out-ck-*
(cd $OUT && tar czf c5.tgz c5)

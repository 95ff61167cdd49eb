#!/bin/bash
# session 34 call 4 (fused_sample spread over the GPU: a block of ids a program, three kernels): its CUDA tests and the sampling / graph tests of
# test_decode.py and test_sample.py; bench_sample (the draw alone, torch form vs kernel, knobs); bench_decode's
# generate rows sampled and greedy (as call 1); sample.py at its defaults for MHA and Tucker checkpoints.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 150 python3 -m pytest -v -rs tests/test_fused_sample.py tests/test_bench_sample.py > $D/test_fused_sample.txt 2>&1
timeout 90 python3 -m scripts.bench_sample --out_dir $D --sweep "BLOCK=256,512,2048,4096 NUM_WARPS=2,8" > $D/bench_sample.log 2>&1
timeout 200 python3 -m pytest -v -rs tests/test_decode.py -k "sample or generat or graph" > $D/test_decode.txt 2>&1
for t in 0.8 0; do
  timeout 120 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph --batches 1 \
    --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph --temperature $t --iters 50 \
    --out_dir $D --name generate_t$t > $D/generate_t$t.log 2>&1
done
python3 -m data.shakespeare.prepare > /dev/null 2>&1
declare -A CFG=([mha]=shakespeare_mha [mla_shared128]=shakespeare_mla_shared128 [tucker_8_64_64]=shakespeare_tucker_8_64_64 [tucker_shared_8_64_64]=shakespeare_tucker_shared_8_64_64)
for v in mha mla_shared128 tucker_8_64_64 tucker_shared_8_64_64; do
  timeout 60 python3 train.py config/${CFG[$v]}.py --max_iters=1 --eval_interval=1 --always_save_checkpoint=True \
    --block_size=1024 --batch_size=4 --eval_full_val=False --eval_iters=1 --out_dir=out-ck-$v > $D/ck_$v.txt 2>&1
  timeout 60 python3 sample.py --out_dir=out-ck-$v --num_samples=3 --max_new_tokens=500 > $D/sample_$v.out 2> $D/sample_$v.err
done
timeout 100 python3 -m pytest -v -rs tests/test_sample.py > $D/test_sample.txt 2>&1
rm -rf out-ck-*
(cd $OUT && tar czf c4.tgz c4)

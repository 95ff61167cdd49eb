#!/bin/bash
# session 35 call 1 (8969a68: session 34's last fused_sample changes, not yet run on a GPU: the max kernel folded into
# round 0 of the histogram kernel (HISTOGRAM constexpr), gumbel_scores, the noise drawn in one place): the CUDA tests
# of fused_sample and of sampling / generate / graphs in test_decode.py; bench_sample at batch 1-32; bench_decode's
# sampled and greedy generate rows; sample.py at its defaults on a Tucker checkpoint.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 120 python3 -m pytest -v -rs tests/test_fused_sample.py > $D/test_fused_sample.txt 2>&1
timeout 120 python3 -m pytest -v -rs tests/test_decode.py -k "sample or generat or graph" > $D/test_decode.txt 2>&1
timeout 60 python3 -m scripts.bench_sample --out_dir $D --batches 1,2,4,8,32 > $D/bench_sample.log 2>&1
for t in 0.8 0; do
  timeout 80 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph --batches 1 \
    --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph --temperature $t --iters 50 \
    --out_dir $D --name generate_t$t > $D/generate_t$t.log 2>&1
done
python3 -m data.shakespeare.prepare > /dev/null 2>&1
timeout 50 python3 train.py config/shakespeare_tucker.py --max_iters=1 --eval_interval=1 --always_save_checkpoint=True \
  --block_size=1024 --batch_size=4 --eval_full_val=False --eval_iters=1 --out_dir=out-ck-tucker > $D/ck_tucker.txt 2>&1
timeout 50 python3 sample.py --out_dir=out-ck-tucker --num_samples=3 --max_new_tokens=500 > $D/sample_tucker.out 2> $D/sample_tucker.err
rm -rf out-ck-*
(cd $OUT && tar czf c1.tgz c1)

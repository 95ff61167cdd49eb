#!/bin/bash
# session 34 call 1 (b14fd42+: the tree at the end of session 33): the review mends that had not run on a GPU (the row
# max taken off before /T, the sampler graph's nan test, generate's loop), sample.py's tests, and the sampled /
# greedy decode rows as a baseline for this session's sampler kernel; diag_sample's pieces again.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 200 python3 -m pytest -v -rs tests/test_decode.py -k "sample or generat or graph" > $D/test_decode.txt 2>&1
timeout 150 python3 -m pytest -v -rs tests/test_sample.py > $D/test_sample.txt 2>&1
for t in 0.8 0; do
  timeout 120 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64 --modes graph --batches 1 \
    --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph --temperature $t --iters 50 \
    --out_dir $D --name generate_t$t > $D/generate_t$t.log 2>&1
done
timeout 60 python3 results/bench/session33/diag_sample.py $D/diag_sample.json > $D/diag_sample.txt 2>&1
(cd $OUT && tar czf c1.tgz c1)

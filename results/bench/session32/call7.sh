#!/bin/bash
# session 32 call 7: the review's mends on the GPU: bench_attention (math-backend reference, option checks) and
# bench_decode_kernel.time_graph (the caller's stream restored after a capture) in short runs; no figure is taken from them.
export PYTHONUNBUFFERED=1
D=$OUT/c7; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 200 python3 -m scripts.bench_attention --shapes 12x1024 --dims 64/64,96/64 --kernels flex,sdpa_auto,sdpa_flash \
    --iters 20 --repeats 5 --out_dir $D --name attention_check > $D/log_attention.txt 2>&1
echo "rc $?" >> $D/log_attention.txt
timeout 200 python3 -m scripts.bench_decode_kernel --quick --cases T64,B1 --out_dir $D --name kernel_check > $D/log_kernel.txt 2>&1
echo "rc $?" >> $D/log_kernel.txt
(cd $OUT && tar czf c7.tgz c7)

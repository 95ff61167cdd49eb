#!/bin/bash
# session 32 call 5 (issue 14, MLA's RoPE cost): call 4 again with the calls replayed from CUDA graphs (no host time) and the
# gradients returned by autograd.grad (call 4 accumulated them into .grad: three add kernels a call)
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt
timeout 420 python3 -m scripts.bench_attention --dims 64/64,96/64,128/64 --iters 50 --repeats 7 --out_dir $D --name attention > $D/log.txt 2>&1
echo "rc $?" >> $D/log.txt
(cd $OUT && tar czf c5.tgz c5)

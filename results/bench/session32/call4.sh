#!/bin/bash
# session 32 call 4 (issue 14, MLA's RoPE cost): causal attention alone at GPT-2's training shapes, scores 64 and 96
# wide (values 64), and 128 wide: does cuDNN pad 96 to 128: each SDPA backend and compiled flex_attention, forward and forward + backward.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt
timeout 420 python3 -m scripts.bench_attention --dims 64/64,96/64,128/64 --iters 50 --repeats 7 --out_dir $D --name attention > $D/log.txt 2>&1
echo "rc $?" >> $D/log.txt
(cd $OUT && tar czf c4.tgz c4)

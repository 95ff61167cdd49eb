#!/bin/bash
# session 32 call 3 (issue 14, MLA's RoPE cost): causal attention alone at GPT-2's training shapes, scores 64 and 96
# wide (values 64): each SDPA backend and compiled flex_attention, forward and forward + backward.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt
timeout 420 python3 -m scripts.bench_attention --out_dir $D --name attention > $D/log.txt 2>&1
echo "rc $?" >> $D/log.txt
(cd $OUT && tar czf c3.tgz c3)

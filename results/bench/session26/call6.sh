#!/bin/bash
# session 26 call 6 (issue 14): MLA's decoupled-RoPE training path after a9b9cf6 (k and v by two matmuls: k now its own
# dense tensor into fused_mla_rope's kernels): their CUDA tests, then MLA learned and RoPE at 12x1024 (its RoPE cost).
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 100 python3 -m pytest -q tests/test_fused_mla_rope.py -k cuda > $D/cuda_tests.txt 2>&1; echo "rc $?" >> $D/cuda_tests.txt
timeout 200 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024 --rope both \
    --variants mla_shared128 --precompile 2 --time_budget 190 --out_dir $D --name mla_rope > $D/log.txt 2>&1
echo "rc $?" >> $D/log.txt
(cd $OUT && tar czf c6.tgz c6)

#!/bin/bash
# session 24 call 2: fused_mla_rope (MLA's decoupled-RoPE query and key in one kernel forward, one backward) against
# the tree before it (.carry/base = 8edae70) in one call; its CUDA tests.
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
ROOT=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 230 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024,64x256 --rope both \
    --variants mla_shared128 --profile mla_shared128 --profile_top 40 --precompile 4 --time_budget 200 \
    --out_dir $D --name mla_fused > $D/log_fused.txt 2>&1
echo "rc $?" >> $D/log_fused.txt
(cd .carry/base && timeout 170 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024,64x256 --rope on \
    --variants mla_shared128 --precompile 2 --time_budget 150 --out_dir $D --name mla_base > $D/log_base.txt 2>&1
 echo "rc $?" >> $D/log_base.txt)
timeout 120 python3 -m pytest -q tests/test_fused_mla_rope.py -k cuda > $D/cuda_tests.txt 2>&1
echo "rc $?" >> $D/cuda_tests.txt
(cd $OUT && tar czf c2.tgz c2)

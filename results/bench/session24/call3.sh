#!/bin/bash
# session 24 call 3: fused_mla_rope's kernels alone (ROWS x NUM_WARPS against inductor's torch form and a copy), its
# CUDA tests (fixed), and the 64x256 training rows call 2 had no time for (this tree, and .carry/base = 8edae70).
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
timeout 150 python3 -m scripts.bench_mla_rope --out_dir $D > $D/log_kernels.txt 2>&1
echo "rc $?" >> $D/log_kernels.txt
timeout 100 python3 -m pytest -q tests/test_fused_mla_rope.py -k cuda > $D/cuda_tests.txt 2>&1
echo "rc $?" >> $D/cuda_tests.txt
timeout 150 python3 -m scripts.bench_train --graph_step --master_weights --shapes 64x256 --rope both \
    --variants mla_shared128 --precompile 2 --time_budget 130 --out_dir $D --name mla_fused_64x256 > $D/log_fused.txt 2>&1
echo "rc $?" >> $D/log_fused.txt
(cd .carry/base && timeout 110 python3 -m scripts.bench_train --graph_step --master_weights --shapes 64x256 --rope on \
    --variants mla_shared128 --time_budget 100 --out_dir $D --name mla_base_64x256 > $D/log_base.txt 2>&1
 echo "rc $?" >> $D/log_base.txt)
(cd $OUT && tar czf c3.tgz c3)

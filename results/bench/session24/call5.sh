#!/bin/bash
# session 24 call 5: the final tree (fused_mla_rope at ROWS 2): MLA shared 128 and MHA, learned and RoPE, both shapes, one
# run (RoPE cost; MLA with RoPE against MHA with RoPE); the kernels alone with the step's strides; the CUDA tests.
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
timeout 60 python3 -m pytest -q tests/test_fused_mla_rope.py -k cuda > $D/cuda_tests.txt 2>&1
echo "rc $?" >> $D/cuda_tests.txt
timeout 60 python3 -m scripts.bench_mla_rope --rows 2,4 --warps 4 --out_dir $D > $D/log_kernels.txt 2>&1
echo "rc $?" >> $D/log_kernels.txt
timeout 350 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024,64x256 --rope both \
    --variants mla_shared128,mha --precompile 4 --time_budget 330 --out_dir $D --name mla_mha_final > $D/log_train.txt 2>&1
echo "rc $?" >> $D/log_train.txt
(cd $OUT && tar czf c5.tgz c5)

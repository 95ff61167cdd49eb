#!/bin/bash
# session 26 call 5 (issue 14): MHA's q, k and v by three matmuls over c_attn's row blocks (each output dense: no
# concatenation of SDPA's gradients in the backward) against one matmul split three ways (.carry/base = git archive
# of HEAD), learned positions and RoPE, both shapes.
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
A="--graph_step --master_weights --shapes 12x1024,64x256 --rope both --variants mha"
(cd .carry/base && timeout 200 python3 -m scripts.bench_train $A --precompile 4 --time_budget 190 \
    --out_dir $D --name base > $D/log_base.txt 2>&1; echo "rc $?" >> $D/log_base.txt)
timeout 210 python3 -m scripts.bench_train $A --precompile 4 --time_budget 200 --profile mha \
    --out_dir $D --name new > $D/log_new.txt 2>&1; echo "rc $?" >> $D/log_new.txt
(cd $OUT && tar czf c5.tgz c5)

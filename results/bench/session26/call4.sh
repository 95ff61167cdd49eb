#!/bin/bash
# session 26 call 4 (issue 14): MLA's shared latent up-projected to k and v by two matmuls (each its own dense output,
# SDPA's gradients used as they are) against the stacked matmul whose split's backward concatenates them
# (.carry/base = git archive f0d66cb), learned positions, alternating base / new twice; MHA in the new runs (MFU).
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
A="--graph_step --master_weights --shapes 12x1024,64x256"
(cd .carry/base && timeout 150 python3 -m scripts.bench_train $A --variants mla_shared128 --precompile 2 --time_budget 140 \
    --out_dir $D --name base_1 > $D/log_base_1.txt 2>&1; echo "rc $?" >> $D/log_base_1.txt)
timeout 200 python3 -m scripts.bench_train $A --variants mla_shared128,mha --precompile 4 --time_budget 190 \
    --profile mla_shared128 --out_dir $D --name new_1 > $D/log_new_1.txt 2>&1; echo "rc $?" >> $D/log_new_1.txt
(cd .carry/base && timeout 70 python3 -m scripts.bench_train $A --variants mla_shared128 --time_budget 65 \
    --out_dir $D --name base_2 > $D/log_base_2.txt 2>&1; echo "rc $?" >> $D/log_base_2.txt)
timeout 70 python3 -m scripts.bench_train $A --variants mla_shared128 --time_budget 65 \
    --out_dir $D --name new_2 > $D/log_new_2.txt 2>&1; echo "rc $?" >> $D/log_new_2.txt
(cd $OUT && tar czf c4.tgz c4)

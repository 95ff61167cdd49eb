#!/bin/bash
# session 25 call 2: where the training step's time goes today (issue 14's section, last refreshed in session 5):
# MHA and Tucker [8,64,64], learned and RoPE, both shapes, profiled, with nanoGPT's bench.py in the same run.
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 560 python3 -m scripts.bench_train --nanogpt .carry/nanogpt --graph_step --master_weights \
    --shapes 12x1024,64x256 --rope both --variants mha,tucker_8_64_64 --profile mha,tucker_8_64_64 --profile_top 25 \
    --precompile 4 --time_budget 530 --out_dir $D --name train_profile > $D/log_train.txt 2>&1
echo "rc $?" >> $D/log_train.txt
(cd $OUT && tar czf c2.tgz c2)

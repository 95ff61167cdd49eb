#!/bin/bash
# session 32 call 8 (issue 14): GQA-8 and Tucker [32,64,64] with per-layer activation checkpointing, profiled (kernels a
# step by category), to measure the limits table's LLaMA bound under checkpointing instead of scaling session 31's.
export PYTHONUNBUFFERED=1
D=$OUT/c8; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 290 python3 -m scripts.bench_train --suite llama1b --master_weights --act_ckpt --variants gqa8,tucker_32_64_64 \
    --profile gqa8,tucker_32_64_64 --profile_top 45 --time_budget 280 --out_dir $D --name train_llama1b_act_ckpt_profile \
    > $D/log.txt 2>&1
echo "rc $?" >> $D/log.txt
(cd $OUT && tar czf c8.tgz c8)

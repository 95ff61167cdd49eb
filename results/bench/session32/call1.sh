#!/bin/bash
# session 32 call 1 (issue 14): LLaMA-3 1B with per-layer activation checkpointing (the paper's setting): GQA-8, Tucker
# [32,64,64] and MHA; then GQA-8 and Tucker without checkpointing in the same mode (compiled step, master weights, no
# graph_step), so that both ratios come from one card.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt
timeout 330 python3 -m scripts.bench_train --suite llama1b --master_weights --act_ckpt --variants gqa8,tucker_32_64_64,mha \
    --precompile 3 --time_budget 320 --out_dir $D --name train_llama1b_act_ckpt > $D/log_act_ckpt.txt 2>&1
echo "rc $?" >> $D/log_act_ckpt.txt
timeout 200 python3 -m scripts.bench_train --suite llama1b --master_weights --variants gqa8,tucker_32_64_64 \
    --precompile 2 --time_budget 190 --out_dir $D --name train_llama1b_plain > $D/log_plain.txt 2>&1
echo "rc $?" >> $D/log_plain.txt
(cd $OUT && tar czf c1.tgz c1)

#!/bin/bash
# session 31 call 2 (issue 14): LLaMA-3 1B, GQA-8 and Tucker [32,64,64], both profiled (40 kernels): where does Tucker's
# iteration lose the 2.5 MFU points under GQA-8's (72.3% against 69.8%, session 30 call 5)?
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 300 python3 -m scripts.bench_train --suite llama1b --graph_step --master_weights --variants gqa8,tucker_32_64_64 \
    --profile gqa8,tucker_32_64_64 --profile_top 45 --precompile 2 --time_budget 280 --out_dir $D \
    --name train_llama1b_profile > $D/log_llama.txt 2>&1
echo "rc $?" >> $D/log_llama.txt
(cd $OUT && tar czf c2.tgz c2)

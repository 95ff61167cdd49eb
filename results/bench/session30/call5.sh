#!/bin/bash
# session 30 call 5 (issue 14): LLaMA-3 1B rows at N=4096 (GQA-8 and Tucker [32,64,64]) on the final tree, with the
# fast path's defaults since session 16 (--graph_step --master_weights); last measured in sessions 10 / 12 without
# master weights.
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 228 python3 -m scripts.bench_train --suite llama1b --graph_step --master_weights --variants gqa8,tucker_32_64_64 \
    --precompile 2 --time_budget 210 --out_dir $D --name train_llama1b_master > $D/log_llama.txt 2>&1
echo "rc $?" >> $D/log_llama.txt
(cd $OUT && tar czf c5.tgz c5)

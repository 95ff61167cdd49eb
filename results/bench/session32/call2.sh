#!/bin/bash
# session 32 call 2 (issue 14): every LLaMA-3 1B row of the paper's timing table, compiled, with per-layer activation
# checkpointing as the paper trained them, in one run on one H200. No precompile: in call 1 the checkpointed rows'
# compiles neither hit nor missed inductor's FX / AOT caches (bypassed), so workers would only cost time.
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt
timeout 555 python3 -m scripts.bench_train --suite llama1b --master_weights --act_ckpt \
    --variants gqa8,mha,tucker_32_64_64,tucker_32_128_64,tucker_32_128_128,gqa2,mqa,mla_sep128,mla_sep64,mla_sep32 \
    --time_budget 540 --out_dir $D --name train_llama1b_act_ckpt_all > $D/log.txt 2>&1
echo "rc $?" >> $D/log.txt
(cd $OUT && tar czf c2.tgz c2)

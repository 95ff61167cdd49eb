#!/bin/bash
# session 31 call 6 (issue 14): LLaMA-3 1B, GQA-8 and Tucker [32,64,64] with activation checkpointing per layer, as the
# paper trained them (tex: "activation checkpointing with per-layer checkpointing"); graph_step cannot capture the
# recomputation (it saves the CUDA RNG state), so the plain compiled step with master weights.
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 175 python3 -m scripts.bench_train --suite llama1b --master_weights --act_ckpt --variants gqa8,tucker_32_64_64 \
    --precompile 2 --time_budget 165 --out_dir $D --name train_llama1b_act_ckpt > $D/log_llama.txt 2>&1
echo "rc $?" >> $D/log_llama.txt
(cd $OUT && tar czf c6.tgz c6)

#!/bin/bash
# session 29 call 4 (issue 14): the training step with K_UP_IN_KERNEL the default, 12x1024, learned and RoPE, MLA and
# MHA in one run (call 3's run skipped MHA's rows for its time budget).
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 225 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024 --rope both \
    --variants mla_shared128,mha --precompile 4 --time_budget 210 --out_dir $D --name kup_12x1024 \
    > $D/log_kup_12x1024.txt 2>&1; echo "rc $?" >> $D/log_kup_12x1024.txt
(cd $OUT && tar czf c4.tgz c4)

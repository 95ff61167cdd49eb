#!/bin/bash
# session 30 call 3 (issue 14): the final tree's training step, the core variants in one run (MHA, Tucker [8,64,64],
# MLA shared 128, Tucker shared [8,64,64]), both shapes, learned positions and RoPE, the default fast path.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 545 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024,64x256 --rope both \
    --variants mha,tucker_8_64_64,mla_shared128,tucker_shared_8_64_64 --precompile 6 --time_budget 525 \
    --out_dir $D --name train_final > $D/log_train_final.txt 2>&1; echo "rc $?" >> $D/log_train_final.txt
(cd $OUT && tar czf c3.tgz c3)

#!/bin/bash
# session 31 call 1 (issue 14): does inductor's max-autotune (Triton GEMM templates, LN folded into a GEMM's
# prologue) shorten Tucker's narrow products? Default rows of MHA and Tucker [8,64,64] first (the same-call
# reference), then the same rows compiled max-autotune-no-cudagraphs, Tucker first, profiled; 12x1024.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
date +%s > $D/t0.txt
timeout 130 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024 \
    --variants mha,tucker_8_64_64 --precompile 2 --time_budget 120 \
    --out_dir $D --name train_default > $D/log_train_default.txt 2>&1; echo "rc $?" >> $D/log_train_default.txt
date +%s >> $D/t0.txt
timeout 400 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024 \
    --compile_mode max-autotune-no-cudagraphs --variants tucker_8_64_64,mha --profile tucker_8_64_64 --profile_top 80 \
    --time_budget 390 --out_dir $D --name train_autotune > $D/log_train_autotune.txt 2>&1; echo "rc $?" >> $D/log_train_autotune.txt
date +%s >> $D/t0.txt
(cd $OUT && tar czf c1.tgz c1)

#!/bin/bash
# session 24 call 1: where MLA's decoupled RoPE cost goes today (profiles of MLA shared 128, learned and RoPE, and MHA's
# rows for the ratio), the default training path (graph_step, master weights).
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 470 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024 --rope both \
    --variants mla_shared128,mha --profile mla_shared128 --profile_top 45 --precompile 3 --time_budget 430 \
    --out_dir $D --name mla_rope_profile > $D/log.txt 2>&1
echo "rc $?" >> $D/log.txt
(cd $OUT && tar czf c1.tgz c1)

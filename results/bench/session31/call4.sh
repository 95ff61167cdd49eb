#!/bin/bash
# session 31 call 4 (issue 14): two of our variants in alternating rounds (loop_gap --against), the comparison the
# "no variant slower than MHA" target needs where one bench_train run per row puts it inside the runs' variation:
# MLA shared 128 with decoupled RoPE against MHA with RoPE, then Tucker [8,64,64] against MHA (learned), 12x1024.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 290 python3 -m scripts.loop_gap --variant mha --against mla_shared128 --rope --shape 12x1024 --graph_step \
    --master_weights --rounds 7 --iters 4 --out_dir $D --name mla_rope_vs_mha_rope > $D/log_mla.txt 2>&1
echo "rc $?" >> $D/log_mla.txt
timeout 230 python3 -m scripts.loop_gap --variant mha --against tucker_8_64_64 --shape 12x1024 --graph_step \
    --master_weights --rounds 5 --iters 4 --out_dir $D --name tucker_vs_mha > $D/log_tucker.txt 2>&1
echo "rc $?" >> $D/log_tucker.txt
(cd $OUT && tar czf c4.tgz c4)

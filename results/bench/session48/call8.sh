#!/usr/bin/env bash
# Session 48 call 8: call 5's table reproduced on today's tree with bench_k_up --settings.
set -u
O=$OUT/c8; mkdir -p $O
python3 -m scripts.bench_k_up --out_dir $O --name heads12x64 --settings 64x3,64x2,64x1,32x1,16x1 > $O/a.log 2>&1; echo "a=$?" > $O/rc.txt
python3 -m scripts.bench_k_up --out_dir $O --name heads16x128 --latents 512 --heads 16 --head_dim 128 --rope_dim 64 \
    --settings 64x3,64x2,64x1,32x1,16x1 > $O/b.log 2>&1; echo "b=$?" >> $O/rc.txt

#!/usr/bin/env bash
# Session 48 call 5 (tree ff7c8fd): scripts/bench_k_up, MLA's key from its latent at each of k_up_launch's settings
# that fit the H200 against k_up's matmul + the K kernel: is the kernel the faster at the settings a wide latent or a
# smaller GPU leaves it?
set -u
O=$OUT/c5; mkdir -p $O
python3 -m scripts.bench_k_up --out_dir $O --name heads12x64 > $O/heads12x64.log 2>&1; echo "a=$?" > $O/rc.txt
python3 -m scripts.bench_k_up --out_dir $O --name heads16x128 --latents 512 --heads 16 --head_dim 128 --rope_dim 64 \
    > $O/heads16x128.log 2>&1; echo "b=$?" >> $O/rc.txt

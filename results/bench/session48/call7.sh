#!/usr/bin/env bash
# Session 48 call 7: bench_k_up after its timing moved to bench_decode_kernel.time_graph (tree above call 6's).
set -u
O=$OUT/c7; mkdir -p $O
python3 -m scripts.bench_k_up --out_dir $O --latents 128,256,512 > $O/k_up.log 2>&1; echo "k_up=$?" > $O/rc.txt

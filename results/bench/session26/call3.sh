#!/bin/bash
# session 26 call 3: B1's rotation as read in fp32 with one rounding (_turn_read) and 32 rows a step at batch 1 for
# keys rotated as read, against the tree before (.carry/base = 1911057: the model's roundings at every op, 64 rows at
# batch 1), Tucker shared with RoPE, one-launch step; the base again with 32 rows at batch 1 (the rows' effect alone).
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
R=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 150 python3 -m pytest -q tests/test_decode_mega.py tests/test_decode_wide.py -k "cuda and (shared_rope or latent)" > $D/cuda_tests.txt 2>&1
echo "rc $?" >> $D/cuda_tests.txt
for i in 1 2; do
  (cd .carry/base && timeout 60 python3 -m scripts.bench_decode --rope --variants tucker_shared_8_64_64 --modes graph_mega \
      --batches 1,32 --contexts 4096,16384 --out_dir $D --name base_$i > $D/log_base_$i.txt 2>&1; echo "rc $?" >> $D/log_base_$i.txt)
  timeout 60 python3 -m scripts.bench_decode --rope --variants tucker_shared_8_64_64 --modes graph_mega \
      --batches 1,32 --contexts 4096,16384 --out_dir $D --name new_$i > $D/log_new_$i.txt 2>&1; echo "rc $?" >> $D/log_new_$i.txt
done
(cd .carry/base && timeout 50 python3 -m scripts.bench_decode --rope --variants tucker_shared_8_64_64 --modes graph_mega \
    --knob decode_mega.BLOCK_N=32 --batches 1 --contexts 4096,16384 --out_dir $D --name base_b1rows32 > $D/log_base_b1rows32.txt 2>&1; echo "rc $?" >> $D/log_base_b1rows32.txt)
(cd $OUT && tar czf c3.tgz c3)

#!/bin/bash
# session 26 call 2: keys rotated as read (Tucker shared with RoPE) in halves, the queries turned back to each step's
# first row (R(n0 + j) = R(n0) R(j)), 64 rows a step at batch 32: the CUDA tests of the changed path, then its speed
# against the default step and against learned positions in the same call; 128 rows a step as a knob.
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 150 python3 -m pytest -q tests/test_decode_mega.py tests/test_decode_wide.py -k "cuda and (shared_rope or latent)" > $D/cuda_tests.txt 2>&1
echo "rc $?" >> $D/cuda_tests.txt
timeout 100 python3 -m scripts.bench_decode --rope --variants tucker_shared_8_64_64 \
    --modes graph_merged,graph_mega --batches 1,32 --contexts 4096,16384 --out_dir $D --name rope > $D/log_rope.txt 2>&1
echo "rc $?" >> $D/log_rope.txt
timeout 80 python3 -m scripts.bench_decode --variants tucker_shared_8_64_64 \
    --modes graph_mega --batches 1,32 --contexts 4096,16384 --out_dir $D --name learned > $D/log_learned.txt 2>&1
echo "rc $?" >> $D/log_learned.txt
timeout 60 python3 -m scripts.bench_decode --rope --variants tucker_shared_8_64_64 --knob decode_wide.BLOCK_N=128 \
    --modes graph_mega --batches 32 --contexts 4096,16384 --out_dir $D --name rope_rows128 > $D/log_rope_rows128.txt 2>&1
echo "rc $?" >> $D/log_rope_rows128.txt
timeout 60 python3 -m scripts.bench_decode --rope --variants tucker_shared_8_64_64 --knob decode_mega.BLOCK_N=32 \
    --modes graph_mega --batches 1 --contexts 4096,16384 --out_dir $D --name rope_b1rows32 > $D/log_rope_b1rows32.txt 2>&1
echo "rc $?" >> $D/log_rope_b1rows32.txt
(cd $OUT && tar czf c2.tgz c2)

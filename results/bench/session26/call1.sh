#!/bin/bash
# session 26 call 1: RoPE in the one-launch decode step on the GPU for the first time (33305a1, 0b6405a, 9bfe943):
# its CUDA tests, then RoPE models' default step (graph_merged) against the one launch (graph_mega), batch 1 and 32,
# 4k and 16k; then the same variants with learned positions in the one launch, for the RoPE cost within it.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt 2>&1
timeout 200 python3 -m pytest -q tests/test_decode_mega.py tests/test_decode_wide.py -k "cuda and rope or cuda and latent" > $D/cuda_tests.txt 2>&1
echo "rc $?" >> $D/cuda_tests.txt
timeout 200 python3 -m scripts.bench_decode --rope --variants mha,mqa,tucker_8_64_64,tucker_shared_8_64_64 \
    --modes graph_merged,graph_mega --batches 1,32 --contexts 4096,16384 --out_dir $D --name rope > $D/log_rope.txt 2>&1
echo "rc $?" >> $D/log_rope.txt
timeout 140 python3 -m scripts.bench_decode --variants mha,mqa,tucker_8_64_64,tucker_shared_8_64_64 \
    --modes graph_mega --batches 1,32 --contexts 4096,16384 --out_dir $D --name learned > $D/log_learned.txt 2>&1
echo "rc $?" >> $D/log_learned.txt
(cd $OUT && tar czf c1.tgz c1)

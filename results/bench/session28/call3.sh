#!/bin/bash
# session 28 call 3: every CUDA test of the final tree (tests named *cuda*) on the H200, with their durations.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 540 python3 -m pytest -q -rs -p no:cacheprovider tests -k cuda --durations=25 > $D/tests_cuda.txt 2>&1
echo "rc $?" >> $D/tests_cuda.txt

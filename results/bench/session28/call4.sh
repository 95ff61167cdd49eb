#!/bin/bash
# session 28 call 4: the CUDA tests call 3 did not reach, but test_decode_wide's (the training kernels, graph step,
# sampler, train.py), with their durations.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/test_fused_gelu.py tests/test_fused_loss.py \
    tests/test_fused_norm.py tests/test_gpu_clock.py tests/test_graph_step.py tests/test_master_adamw.py \
    tests/test_sample.py tests/test_train.py -k cuda --durations=30 > $D/tests_cuda_rest.txt 2>&1
echo "rc $?" >> $D/tests_cuda_rest.txt

#!/bin/bash
# session 22 call 8: the CUDA tests after the B1 item helper was shared (decode_wide all, decode_mega's one-launch
# cases and its generate case).
export PYTHONUNBUFFERED=1
D=$OUT/c8; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
T0=$(date +%s)
timeout 110 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $? $(( $(date +%s) - T0 ))s" >> $D/tests_wide.log
timeout 70 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_mega.py -k "cuda_one_launch or cuda_generate" > $D/tests_mega.log 2>&1; echo "rc $? $(( $(date +%s) - T0 ))s" >> $D/tests_mega.log

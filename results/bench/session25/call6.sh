#!/bin/bash
# session 25 call 6: every CUDA test of decode_wide (the one-launch step at 5-32 sequences) after the MLA and attn_rows changes
mkdir -p $OUT/c6; timeout 220 python3 -m pytest -q tests/test_decode_wide.py -k cuda > $OUT/c6/cuda_tests_wide.txt 2>&1

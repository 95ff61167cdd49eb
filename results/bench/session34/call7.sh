#!/bin/bash
# session 34 call 7 (the review's changes to fused_sample: the winning score written, -0 -> +0, new CUDA tests)
export PYTHONUNBUFFERED=1
D=$OUT/c7; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 110 python3 -m pytest -v -rs tests/test_fused_sample.py > $D/test_fused_sample.txt 2>&1
timeout 60 python3 -m pytest -v -rs tests/test_decode.py -k "sample_next or graph_sampling" > $D/test_decode.txt 2>&1
(cd $OUT && tar czf c7.tgz c7)

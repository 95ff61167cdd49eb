#!/bin/bash
# session 33 call 6: the final tree's CUDA tests of sampling and the graph-replayed step (test_decode.py), and sample.py's tests
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 200 python3 -m pytest -v -rs tests/test_decode.py -k "sample or generat or graph" > $D/test_decode.txt 2>&1
timeout 120 python3 -m pytest -v -rs tests/test_sample.py > $D/test_sample.txt 2>&1

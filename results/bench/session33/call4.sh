#!/bin/bash
# session 33 call 4: where a sampled token's extra GPU time goes (results/bench/session33/diag_sample.py)
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 200 python3 results/bench/session33/diag_sample.py $D/diag_sample.json > $D/diag_sample.txt 2>&1
echo "rc $?" >> $D/diag_sample.txt

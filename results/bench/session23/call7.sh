#!/bin/bash
# session 23 call 7: every program's barrier stamps (SM included) of 10 one-launch steps at batch 32 / 16k, for B1's
# tail (analysed on the CPU: results/bench/session23/b1_tail.py).
export PYTHONUNBUFFERED=1
D=$OUT/c7; mkdir -p $D
timeout 100 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,tucker_shared_8_64_64 --batch 32 --context 16384 --dump $D > $D/barriers.txt 2>&1
echo "rc $?" >> $D/barriers.txt

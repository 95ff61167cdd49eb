#!/bin/bash
# session 17 call 10: where generate's time goes with decode='graph' and 'mega' (a diagnostic, not a benchmark)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c10; mkdir -p $D
timeout 200 python3 results/bench/session17/diag/gen_gap.py tucker_8_64_64 > $D/gen_gap.txt 2>&1
cd $OUT && tar czf c10.tgz c10

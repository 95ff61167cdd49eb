#!/bin/bash
# session 37 call 5: test_decode_linear's graph-chain test after its eager assert became PDL-only.
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 120 python3 -m pytest -v -rs -p no:cacheprovider tests/test_decode_linear.py -k "chain_in_a_graph" > $D/test_chain.txt 2>&1
echo "test_chain rc $?" >> $D/rc.txt
(cd $OUT && tar czf c5.tgz c5)

#!/bin/bash
# session 20 call 10: every CUDA test of decode_mega and decode_linear on the final tree
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c10; mkdir -p $D
timeout 420 python3 -m pytest -q -rs tests/test_decode_mega.py -k cuda > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
(cd $OUT && tar czf c10.tgz c10)
cd $R && timeout 120 python3 -m pytest -q -rs tests/test_decode_linear.py -k cuda > $D/tests_linear.log 2>&1; echo "tests rc $?" >> $D/tests_linear.log
cd $OUT && tar czf c10.tgz c10

#!/bin/bash
# session 17 call 13: the CUDA tests of decode_mega after the review's mends
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c13; mkdir -p $D
timeout 300 python3 -m pytest -q -rs tests/test_decode_mega.py tests/test_decode.py -k "cuda" > $D/tests_cuda.log 2>&1; echo "tests rc $?" >> $D/tests_cuda.log
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 > $D/barriers.txt 2>&1
cd $OUT && tar czf c13.tgz c13

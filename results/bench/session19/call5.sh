#!/bin/bash
# session 19 call 5: the rest of test_decode_mega's CUDA tests on the final tree (call 4 ran the others)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
timeout 330 python3 -m pytest -q -rs tests/test_decode_mega.py -k "cuda and not (tucker-1 or mha-1 or gqa-3 or timed or generate)" > $D/tests_mega_rest.log 2>&1; echo "tests rc $?" >> $D/tests_mega_rest.log

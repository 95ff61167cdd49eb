#!/bin/bash
# session 19 call 6: after the reread's mend (decode_linear._scale_shift shared): decode_linear's and the one-launch
# step's CUDA tests, and the batch-1 steps once more
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
timeout 60 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64 --batches 1 --contexts 4096 --modes graph_merged,graph_mega --out_dir $D --name mend > $D/mend.log 2>&1
timeout 120 python3 -m pytest -q -rs tests/test_decode_linear.py tests/test_decode_mega.py -k "cuda and (linear or tucker-1-defaults)" > $D/tests.log 2>&1; echo "tests rc $?" >> $D/tests.log

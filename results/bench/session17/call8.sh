#!/bin/bash
# session 17 call 8: the generate test (fixed), and where generate's time goes with decode='graph' and 'mega'
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c8; mkdir -p $D
timeout 150 python3 -m pytest -q -rs tests/test_decode_mega.py -k "cuda_generate" > $D/tests_generate.log 2>&1; echo "tests rc $?" >> $D/tests_generate.log
timeout 200 python3 -m scripts.bench_decode --variants tucker_8_64_64,mqa --modes graph_merged,graph_mega --batches 1 --contexts 4096 --generate 500 --generate_modes graph,mega --generate_profile 50 --out_dir $D --name generate_profile > $D/generate_profile.log 2>&1
cd $OUT && tar czf c8.tgz c8

#!/bin/bash
# session 17 call 7: GPT.generate(decode='mega') (sample.py --decode=mega): CUDA tests, then sample.py's loop end to
# end (model.generate, 500 greedy tokens at batch 1) with decode='graph' against decode='mega'
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c7; mkdir -p $D
timeout 240 python3 -m pytest -q -rs tests/test_decode_mega.py tests/test_sample.py -k "cuda or mega" > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
timeout 100 python3 -m pytest -q -rs tests/test_decode.py -k "cuda" > $D/tests_decode.log 2>&1; echo "tests rc $?" >> $D/tests_decode.log
timeout 200 python3 -m scripts.bench_decode --variants mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged --batches 1 --contexts 4096 --generate 500 --generate_modes graph,mega --out_dir $D --name generate_mega > $D/generate_mega.log 2>&1
cd $OUT && tar czf c7.tgz c7

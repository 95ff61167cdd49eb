#!/bin/bash
# session 17 call 6: decode_mega's B1 preload (PRELOAD_KV) on against off, CUDA tests, barrier profile
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
timeout 200 python3 -m pytest -q -rs tests/test_decode_mega.py -k cuda > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
M="python3 -m scripts.bench_decode --variants mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 1 --contexts 4096,16384 --out_dir $D"
timeout 90 $M --knob decode_mega.PRELOAD_KV=False --name mega_nopre > $D/mega_nopre.log 2>&1
timeout 90 $M --name mega_pre > $D/mega_pre.log 2>&1
timeout 90 $M --knob decode_mega.PRELOAD_KV=False --name mega_nopre2 > $D/mega_nopre2.log 2>&1
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 > $D/barriers_pre.txt 2>&1
cd $OUT && tar czf c6.tgz c6

#!/bin/bash
# session 20 call 4: decode_mega.CACHE_AHEAD against the defaults (batch 1, 4k and 16k), twice; stamps; CUDA tests
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c4; mkdir -p $D; git log --oneline -1 > $D/commit.txt 2>&1
V=mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --batches 1 --out_dir $D"
K=decode_mega.CACHE_AHEAD=True
timeout 110 $B --variants $V --contexts 4096,16384 --modes graph_merged,graph_mega --name base > $D/base.log 2>&1
timeout 70 $B --variants $V --contexts 4096,16384 --modes graph_mega --knob $K --name cache > $D/cache.log 2>&1
timeout 60 $B --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --contexts 4096 --modes graph_merged,graph_mega --name base2 > $D/base2.log 2>&1
timeout 50 $B --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --contexts 4096 --modes graph_mega --knob $K --name cache2 > $D/cache2.log 2>&1
(cd $OUT && tar czf c4.tgz c4)
timeout 45 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 --knob $K --dump $D/dump_cache > $D/barriers_cache.txt 2>&1
(cd $OUT && tar czf c4.tgz c4)
cd $R && timeout 120 python3 -m pytest -q -rs tests/test_decode_mega.py -k "cuda and CACHE_AHEAD" > $D/tests.log 2>&1; echo "tests rc $?" >> $D/tests.log
cd $OUT && tar czf c4.tgz c4

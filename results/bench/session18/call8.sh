#!/bin/bash
# session 18 call 8: B1's attention splits of 32 rows (knobs MAX_SPLITS=256, BLOCK_N=32, MIN_CHUNK=32) against the
# defaults (128 splits at most, 64 rows a block), same machine
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c8; mkdir -p $D
V=mha,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --variants $V --batches 1 --contexts 4096,16384 --modes graph_mega --out_dir $D"
K="--knob decode_mega.MAX_SPLITS=256 --knob decode_mega.BLOCK_N=32 --knob decode_mega.MIN_CHUNK=32"
timeout 60 $B --name base > $D/base.log 2>&1
timeout 60 $B $K --name splits32 > $D/splits32.log 2>&1
timeout 60 $B --knob decode_mega.MAX_SPLITS=256 --name maxsplits256 > $D/maxsplits256.log 2>&1
timeout 60 $B --name base2 > $D/base2.log 2>&1
timeout 40 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 $K > $D/barriers_splits32.txt 2>&1
timeout 100 python3 .carry/calls/splits_check.py > $D/splits_check.log 2>&1; echo "rc $?" >> $D/splits_check.log
cd $OUT && tar czf c8.tgz c8

#!/bin/bash
# session 23 call 1: B1's whole steps unmasked (d465f96) against the tree before (9304276, .carry/base);
# WEIGHTS_AHEAD 1 / 2; Tucker at 2 groups of 64 rows; MHA's default step before and after; CUDA tests.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $D/gpu.txt
T0=$(date +%s)
ARGS="--modes graph_mega --contexts 16384 --batches 32 --variants tucker_8_64_64,tucker_shared_8_64_64"
MHA="python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384"
t() { echo "$1 $(( $(date +%s) - T0 ))s" >> $D/times.txt; }
timeout 40 $MHA --out_dir $D --name mha1 > $D/mha1.log 2>&1; t mha1
(cd .carry/base && timeout 60 python3 -m scripts.bench_decode $ARGS --out_dir $D --name base > $D/base.log 2>&1); t base
timeout 60 python3 -m scripts.bench_decode $ARGS --out_dir $D --name new > $D/new.log 2>&1; t new
(cd $OUT && tar czf c1.tgz c1)
timeout 60 python3 -m scripts.bench_decode $ARGS --out_dir $D --name ahead1 --knob decode_wide.WEIGHTS_AHEAD=1 > $D/ahead1.log 2>&1; t ahead1
timeout 60 python3 -m scripts.bench_decode $ARGS --out_dir $D --name ahead2 --knob decode_wide.WEIGHTS_AHEAD=2 > $D/ahead2.log 2>&1; t ahead2
timeout 60 python3 -m scripts.bench_decode $ARGS --out_dir $D --name rows128 --knob "decode_wide.ATTN_ROWS={False: 128, True: 128}" > $D/rows128.log 2>&1; t rows128
(cd .carry/base && timeout 60 python3 -m scripts.bench_decode $ARGS --out_dir $D --name base2 > $D/base2.log 2>&1); t base2
timeout 60 python3 -m scripts.bench_decode $ARGS --out_dir $D --name new2 > $D/new2.log 2>&1; t new2
timeout 40 $MHA --out_dir $D --name mha2 > $D/mha2.log 2>&1; t mha2
(cd $OUT && tar czf c1.tgz c1)
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $? $(( $(date +%s) - T0 ))s" >> $D/tests_wide.log
(cd $OUT && tar czf c1.tgz c1)

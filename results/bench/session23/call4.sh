#!/bin/bash
# session 23 call 4: B1 in equal shares a program (FLAT_SPLITS) against the defaults; barrier profiles; MHA twice;
# CUDA tests of decode_wide.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $D/gpu.txt
T0=$(date +%s)
ARGS="--modes graph_mega --contexts 16384 --batches 32 --variants tucker_8_64_64,tucker_shared_8_64_64"
MHA="python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384"
t() { echo "$1 $(( $(date +%s) - T0 ))s" >> $D/times.txt; }
b() { n=$1; shift; timeout 60 python3 -m scripts.bench_decode $ARGS --out_dir $D --name $n "$@" > $D/$n.log 2>&1; t $n; }
timeout 40 $MHA --out_dir $D --name mha1 > $D/mha1.log 2>&1; t mha1
b new
b flat --knob decode_wide.FLAT_SPLITS=True
b new2
b flat2 --knob decode_wide.FLAT_SPLITS=True
timeout 40 $MHA --out_dir $D --name mha2 > $D/mha2.log 2>&1; t mha2
(cd $OUT && tar czf c4.tgz c4)
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,tucker_shared_8_64_64 --batch 32 --context 16384 --knob decode_wide.FLAT_SPLITS=True > $D/barriers_flat.txt 2>&1; t barriers_flat
(cd $OUT && tar czf c4.tgz c4)
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $? $(( $(date +%s) - T0 ))s" >> $D/tests_wide.log
(cd $OUT && tar czf c4.tgz c4)

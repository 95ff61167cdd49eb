#!/bin/bash
# session 23 call 3: B2 folded into B1 (FOLD_B2, FOLD_HEADS 4 / 8) against the defaults; barrier profile; MHA twice;
# CUDA tests of decode_wide.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $D/gpu.txt
T0=$(date +%s)
ARGS="--modes graph_mega --contexts 16384 --batches 32 --variants tucker_8_64_64,tucker_shared_8_64_64"
MHA="python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384"
t() { echo "$1 $(( $(date +%s) - T0 ))s" >> $D/times.txt; }
b() { n=$1; shift; timeout 60 python3 -m scripts.bench_decode $ARGS --out_dir $D --name $n "$@" > $D/$n.log 2>&1; t $n; }
timeout 40 $MHA --out_dir $D --name mha1 > $D/mha1.log 2>&1; t mha1
b new
b fold --knob decode_wide.FOLD_B2=True
b fold8 --knob decode_wide.FOLD_B2=True --knob decode_wide.FOLD_HEADS=8
b new2
b fold2 --knob decode_wide.FOLD_B2=True
timeout 40 $MHA --out_dir $D --name mha2 > $D/mha2.log 2>&1; t mha2
(cd $OUT && tar czf c3.tgz c3)
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,tucker_shared_8_64_64 --batch 32 --context 16384 --knob decode_wide.FOLD_B2=True > $D/barriers_fold.txt 2>&1; t barriers_fold
(cd $OUT && tar czf c3.tgz c3)
timeout 220 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $? $(( $(date +%s) - T0 ))s" >> $D/tests_wide.log
(cd $OUT && tar czf c3.tgz c3)

#!/bin/bash
# session 22 call 6: B2 with 2 (sequence, head) pairs a program (default now) against 1; SPLIT_D 1 against 2 with
# the hoisted epilogue loads; CUDA tests; MHA's default step before and after.
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
T0=$(date +%s)
B="python3 -m scripts.bench_decode --modes graph_mega --contexts 16384 --batches 32 --out_dir $D --variants tucker_8_64_64,tucker_shared_8_64_64"
timeout 40 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha1 > $D/mha1.log 2>&1
timeout 60 $B --name merge2 > $D/merge2.log 2>&1
timeout 60 $B --knob decode_wide.MERGE_HEADS=1 --name merge1 > $D/merge1.log 2>&1
(cd $OUT && tar czf c6.tgz c6)
timeout 60 $B --knob decode_wide.SPLIT_D=1 --name splitd1 > $D/splitd1.log 2>&1
timeout 60 $B --name merge2_repeat > $D/merge2_repeat.log 2>&1
timeout 40 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha2 > $D/mha2.log 2>&1
echo "bench done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c6.tgz c6)
timeout 130 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $? $(( $(date +%s) - T0 ))s" >> $D/tests_wide.log
(cd $OUT && tar czf c6.tgz c6)

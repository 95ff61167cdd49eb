#!/bin/bash
# session 23 call 5: the final tree's table (MHA default; MQA, Tucker, Tucker shared default and one-launch; batch 8
# and 32, 4k and 16k), MHA at 32 / 16k again, CUDA tests of decode_wide.
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $D/gpu.txt
T0=$(date +%s)
t() { echo "$1 $(( $(date +%s) - T0 ))s" >> $D/times.txt; }
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 8,32 --contexts 4096,16384 --out_dir $D --name mha1 > $D/mha1.log 2>&1; t mha1
timeout 120 python3 -m scripts.bench_decode --variants mqa,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged,graph_mega --batches 8,32 --contexts 4096,16384 --out_dir $D --name wide > $D/wide.log 2>&1; t wide
timeout 40 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha2 > $D/mha2.log 2>&1; t mha2
(cd $OUT && tar czf c5.tgz c5)
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $? $(( $(date +%s) - T0 ))s" >> $D/tests_wide.log
(cd $OUT && tar czf c5.tgz c5)

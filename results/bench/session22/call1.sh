#!/bin/bash
# session 22 call 1: decode_wide's lanes (two halves of the batch, each with its own programs and barriers, their
# cache reads ordered one lane at a time). CUDA tests; batch 32 and 8 at 16k: lanes 2 (default) / 1 / unordered;
# MHA's default step as the ratios' denominator, twice; the barrier profile of the lanes.
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
T0=$(date +%s)
timeout 120 python3 -m pytest -q -rs tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $? $(( $(date +%s) - T0 ))s" >> $D/tests_wide.log
(cd $OUT && tar czf c1.tgz c1)
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha1 > $D/mha1.log 2>&1
timeout 120 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64,mqa --modes graph_mega --batches 8,32 --contexts 16384 --out_dir $D --name lanes2 > $D/lanes2.log 2>&1
echo "lanes2 done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c1.tgz c1)
timeout 100 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 8,32 --contexts 16384 --knob decode_wide.LANES=1 --out_dir $D --name lanes1 > $D/lanes1.log 2>&1
echo "lanes1 done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c1.tgz c1)
timeout 60 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 32 --contexts 16384 --knob decode_wide.LANE_ORDER=False --out_dir $D --name unordered > $D/unordered.log 2>&1
(cd $OUT && tar czf c1.tgz c1)
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,tucker_shared_8_64_64 --batch 32 --context 16384 > $D/barriers.txt 2>&1
echo "profile done $(( $(date +%s) - T0 ))s" >> $D/times.txt
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha2 > $D/mha2.log 2>&1
echo "all done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c1.tgz c1)

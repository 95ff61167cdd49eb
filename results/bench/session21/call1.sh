#!/bin/bash
# session 21 call 1: decode_wide's CUDA tests; batch 32 at 16k, the default step against the wide one-launch step;
# the wide step's knobs for the two Tucker rows
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $D/gpu.txt
git log --oneline | head -1 > $D/commit.txt
timeout 170 python3 -m pytest -q -rs tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $?" >> $D/tests_wide.log
(cd $OUT && tar czf c1.tgz c1)
timeout 170 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64,mqa,mha --modes graph_mega,graph_merged --batches 32 --contexts 16384 --out_dir $D --name b32 > $D/b32.log 2>&1
(cd $OUT && tar czf c1.tgz c1)
for kv in BK=64 STAGES=2 BN=32 STAGES=4; do
  timeout 45 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 32 --contexts 16384 --knob decode_wide.$kv --out_dir $D --name b32_$kv > $D/b32_$kv.log 2>&1
  (cd $OUT && tar czf c1.tgz c1)
done

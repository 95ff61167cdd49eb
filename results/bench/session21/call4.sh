#!/bin/bash
# session 21 call 4: decode_wide with the norm after the product, the merge in B1, 16 KB attention steps: CUDA tests,
# batch 32 at 16k against the default step, phase profile, knobs
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
git log --oneline | head -1 > $D/commit.txt
timeout 150 python3 -m pytest -q -rs tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $?" >> $D/tests_wide.log
(cd $OUT && tar czf c4.tgz c4)
timeout 120 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64,mqa,mha --modes graph_merged,graph_mega --batches 32 --contexts 16384 --out_dir $D --name b32 > $D/b32.log 2>&1
(cd $OUT && tar czf c4.tgz c4)
timeout 50 python3 -m scripts.profile_mega --variants tucker_8_64_64,tucker_shared_8_64_64 --batch 32 --context 16384 --steps 5 > $D/phases.txt 2>&1
(cd $OUT && tar czf c4.tgz c4)
for kv in LAST_SPLIT_MERGES=False ATTN_STAGE_BYTES=32768 ATTN_STAGE_BYTES=8192; do
  timeout 35 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 32 --contexts 16384 --knob decode_wide.$kv --out_dir $D --name b32_${kv/=/_} > $D/b32_${kv/=/_}.log 2>&1
  (cd $OUT && tar czf c4.tgz c4)
done

#!/bin/bash
# session 21 call 5: decode_wide with L2 prefetches, B2 as a phase: CUDA tests (wide; batch-1 mega cases after the
# shared helpers' refactor), batch 32 at 16k, batch 1 at 4k (no regression), knobs
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
git log --oneline | head -1 > $D/commit.txt
timeout 110 python3 -m pytest -q -rs tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $?" >> $D/tests_wide.log
timeout 80 python3 -m pytest -q -rs tests/test_decode_mega.py -k "one_launch and (tucker-1-defaults or gqa-3-defaults or mha-1-defaults)" > $D/tests_mega.log 2>&1; echo "rc $?" >> $D/tests_mega.log
(cd $OUT && tar czf c5.tgz c5)
timeout 90 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64,mha --modes graph_merged,graph_mega --batches 32 --contexts 16384 --out_dir $D --name b32 > $D/b32.log 2>&1
(cd $OUT && tar czf c5.tgz c5)
for kv in PREFETCH=False ATTN_STAGE_BYTES=32768; do
  timeout 35 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 32 --contexts 16384 --knob decode_wide.$kv --out_dir $D --name b32_${kv/=/_} > $D/b32_${kv/=/_}.log 2>&1
  (cd $OUT && tar czf c5.tgz c5)
done
timeout 60 python3 -m scripts.bench_decode --variants tucker_8_64_64,mha --modes graph_merged,graph_mega --batches 1 --contexts 4096 --out_dir $D --name b1 > $D/b1.log 2>&1
(cd $OUT && tar czf c5.tgz c5)

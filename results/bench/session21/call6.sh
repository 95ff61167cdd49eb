#!/bin/bash
# session 21 call 6 (final defaults): decode_wide's CUDA tests; batch 8 and 32 at 4k and 16k, the default step
# against the one-launch step (MHA: its default step only, the ratios' denominator); the batch-32/16k rows again
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
git log --oneline | head -1 > $D/commit.txt
timeout 110 python3 -m pytest -q -rs tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $?" >> $D/tests_wide.log
(cd $OUT && tar czf c6.tgz c6)
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 8,32 --contexts 4096,16384 --out_dir $D --name wide_mha > $D/wide_mha.log 2>&1
(cd $OUT && tar czf c6.tgz c6)
timeout 150 python3 -m scripts.bench_decode --variants mqa,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged,graph_mega --batches 8,32 --contexts 4096,16384 --out_dir $D --name wide > $D/wide.log 2>&1
(cd $OUT && tar czf c6.tgz c6)
timeout 60 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name b32_repeat_merged > $D/b32_repeat_merged.log 2>&1
timeout 45 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 32 --contexts 16384 --out_dir $D --name b32_repeat_mega > $D/b32_repeat_mega.log 2>&1
(cd $OUT && tar czf c6.tgz c6)

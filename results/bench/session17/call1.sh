#!/bin/bash
# session 17 call 1: decode_mega's early arrival (weights loaded between arrive and wait) against the old order,
# and the one-launch step's phases timed by its barrier stamps
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git log --oneline | head -1 > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $D/smi.txt
timeout 200 python3 -m pytest -q -rs tests/test_decode_mega.py -k cuda > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
timeout 90 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 > $D/barriers_early.txt 2>&1
timeout 90 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 --knob decode_mega.EARLY_ARRIVE=False > $D/barriers_late.txt 2>&1
V=mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64
timeout 150 python3 -m scripts.bench_decode --variants $V --modes graph_merged,graph_mega --batches 1 --contexts 4096,16384 --out_dir $D --name mega_early > $D/mega_early.log 2>&1
timeout 80 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 1 --contexts 4096 --knob decode_mega.EARLY_ARRIVE=False --out_dir $D --name mega_late > $D/mega_late.log 2>&1
timeout 80 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 1 --contexts 4096 --knob decode_mega.TILE_LM=32768 --out_dir $D --name mega_lm32k > $D/mega_lm32k.log 2>&1
cd $OUT && tar czf c1.tgz c1

#!/bin/bash
# session 17 call 5: decode_mega at its new defaults (2 programs x 4 warps an SM): CUDA tests, against the default
# path, the barrier profile, and three knobs
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
timeout 200 python3 -m pytest -q -rs tests/test_decode_mega.py -k cuda > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
V=mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64
timeout 150 python3 -m scripts.bench_decode --variants $V --modes graph_merged,graph_mega --batches 1 --contexts 4096,16384 --out_dir $D --name mega_2x4 > $D/mega_2x4.log 2>&1
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 > $D/barriers_2x4.txt 2>&1
M="python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 1 --contexts 4096 --out_dir $D"
timeout 60 $M --knob decode_mega.PROGRAMS_PER_SM=4 --knob decode_mega.NUM_WARPS=2 --name mega_4x2 > $D/mega_4x2.log 2>&1
timeout 60 $M --knob decode_mega.MIN_CHUNK=32 --name mega_chunk32 > $D/mega_chunk32.log 2>&1
timeout 60 $M --knob decode_mega.TILE_LM=32768 --name mega_lm32k > $D/mega_lm32k.log 2>&1
timeout 60 $M --name mega_2x4_again > $D/mega_2x4_again.log 2>&1
cd $OUT && tar czf c5.tgz c5

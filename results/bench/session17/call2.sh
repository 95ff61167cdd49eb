#!/bin/bash
# session 17 call 2: decode_mega with L2 prefetches (default on) against off, the PTX poll loop, LM_AHEAD
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
git log --oneline | head -1 > $D/commit.txt; git status --short >> $D/commit.txt
timeout 200 python3 -m pytest -q -rs tests/test_decode_mega.py -k cuda > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
B="python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096"
timeout 60 $B > $D/barriers_pf.txt 2>&1
timeout 60 $B --knob decode_mega.L2_PREFETCH=False > $D/barriers_nopf.txt 2>&1
timeout 60 $B --knob decode_mega.POLL_ASM=True > $D/barriers_poll.txt 2>&1
V=mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64
timeout 150 python3 -m scripts.bench_decode --variants $V --modes graph_merged,graph_mega --batches 1 --contexts 4096,16384 --out_dir $D --name mega_pf > $D/mega_pf.log 2>&1
M="python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 1 --contexts 4096 --out_dir $D"
timeout 60 $M --knob decode_mega.L2_PREFETCH=False --name mega_nopf > $D/mega_nopf.log 2>&1
timeout 60 $M --knob decode_mega.POLL_ASM=True --name mega_poll > $D/mega_poll.log 2>&1
timeout 60 $M --knob decode_mega.LM_AHEAD=8 --name mega_ahead8 > $D/mega_ahead8.log 2>&1
timeout 60 $M --knob decode_mega.POLL_ASM=True --knob decode_mega.TILE_LM=32768 --name mega_poll_lm32k > $D/mega_poll_lm32k.log 2>&1
cd $OUT && tar czf c2.tgz c2

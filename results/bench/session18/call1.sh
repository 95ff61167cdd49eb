#!/bin/bash
# session 18 call 1: decode_mega's fused MLP (FUSED_MLP, 4 barriers a layer) against the two phases, same machine
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git log --oneline -1 > $D/commit.txt 2>&1; nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv >> $D/commit.txt 2>&1
V=mha,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --variants $V --batches 1 --contexts 4096,16384 --out_dir $D"
timeout 100 $B --modes graph_merged,graph_mega --knob decode_mega.FUSED_MLP=False --name unfused > $D/unfused.log 2>&1
timeout 80 $B --modes graph_mega --name fused > $D/fused.log 2>&1
timeout 80 $B --modes graph_mega --knob decode_mega.MLP_PROJ_AHEAD=True --name fused_ahead > $D/fused_ahead.log 2>&1
timeout 80 $B --modes graph_merged,graph_mega --knob decode_mega.FUSED_MLP=False --name unfused2 > $D/unfused2.log 2>&1
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 > $D/barriers_fused.txt 2>&1
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 --knob decode_mega.FUSED_MLP=False > $D/barriers_unfused.txt 2>&1
timeout 150 python3 -m pytest -q -rs tests/test_decode_mega.py -k cuda > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
cd $OUT && tar czf c1.tgz c1

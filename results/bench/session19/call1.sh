#!/bin/bash
# session 19 call 1: decode_mega's VEC_AHEAD (norm weights and biases loaded in the barriers) against it off, and
# MLP_SPREAD, same machine; CUDA tests; barrier profiles
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git log --oneline -1 > $D/commit.txt 2>&1; nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv >> $D/commit.txt 2>&1
V=mha,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --variants $V --batches 1 --contexts 4096,16384 --out_dir $D"
timeout 100 $B --modes graph_merged,graph_mega --knob decode_mega.VEC_AHEAD=False --name late > $D/late.log 2>&1
timeout 70 $B --modes graph_mega --name ahead > $D/ahead.log 2>&1
timeout 70 $B --modes graph_mega --knob decode_mega.MLP_SPREAD=True --name spread > $D/spread.log 2>&1
timeout 70 $B --modes graph_mega --knob decode_mega.VEC_AHEAD=False --name late2 > $D/late2.log 2>&1
timeout 100 $B --modes graph_merged,graph_mega --name ahead2 > $D/ahead2.log 2>&1
timeout 50 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 > $D/barriers_ahead.txt 2>&1
timeout 50 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 --knob decode_mega.VEC_AHEAD=False > $D/barriers_late.txt 2>&1
timeout 180 python3 -m pytest -q -rs tests/test_decode_mega.py -k cuda > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
cd $OUT && tar czf c1.tgz c1

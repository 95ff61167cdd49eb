#!/bin/bash
# session 20 call 7: decode_mega.MLP_PROJ_AHEAD=True (W_proj^T's tile loaded at the MLP phase's start; no spills since
# PRODUCT_2D) against the defaults (batch 1, 4k and 16k), twice; stamps
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c7; mkdir -p $D; git log --oneline -1 > $D/commit.txt 2>&1
B="python3 -m scripts.bench_decode --batches 1 --out_dir $D --variants mha,tucker_8_64_64,tucker_shared_8_64_64"
K="--knob decode_mega.MLP_PROJ_AHEAD=True"
timeout 80 $B --contexts 4096,16384 --modes graph_merged,graph_mega --name base > $D/base.log 2>&1
timeout 60 $B --contexts 4096,16384 --modes graph_mega $K --name ahead > $D/ahead.log 2>&1
timeout 60 $B --contexts 4096 --modes graph_merged,graph_mega --name base2 > $D/base2.log 2>&1
timeout 50 $B --contexts 4096 --modes graph_mega $K --name ahead2 > $D/ahead2.log 2>&1
(cd $OUT && tar czf c7.tgz c7)
timeout 45 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 $K > $D/barriers_ahead.txt 2>&1
cd $OUT && tar czf c7.tgz c7

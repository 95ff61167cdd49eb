#!/bin/bash
# session 20 call 6: knob sweep on the defaults (batch 1, 4k): MLP_COPIES 2 / 8, B1's splits of 32 rows
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c6; mkdir -p $D; git log --oneline -1 > $D/commit.txt 2>&1
B="python3 -m scripts.bench_decode --batches 1 --contexts 4096 --out_dir $D --variants mha,tucker_8_64_64,tucker_shared_8_64_64"
S="--knob decode_mega.MAX_SPLITS=256 --knob decode_mega.BLOCK_N=32 --knob decode_mega.MIN_CHUNK=32"
timeout 70 $B --modes graph_merged,graph_mega --name base > $D/base.log 2>&1
timeout 50 $B --modes graph_mega --knob decode_mega.MLP_COPIES=2 --name copies2 > $D/copies2.log 2>&1
timeout 50 $B --modes graph_mega --knob decode_mega.MLP_COPIES=8 --name copies8 > $D/copies8.log 2>&1
timeout 50 $B --modes graph_mega $S --name splits32 > $D/splits32.log 2>&1
timeout 50 $B --modes graph_merged,graph_mega --name base2 > $D/base2.log 2>&1
timeout 50 $B --modes graph_mega --knob decode_mega.MLP_COPIES=8 --name copies8b > $D/copies8b.log 2>&1
timeout 50 $B --modes graph_mega $S --name splits32b > $D/splits32b.log 2>&1
cd $OUT && tar czf c6.tgz c6

#!/bin/bash
# session 18 call 2: the fused MLP's W_proj^T tile prefetched into L2 (MLP_PROJ_PREFETCH 1: at B1's start, 2: at B2D's end)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
V=mha,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --variants $V --batches 1 --contexts 4096,16384 --out_dir $D"
timeout 90 $B --modes graph_merged,graph_mega --name pf0 > $D/pf0.log 2>&1
timeout 70 $B --modes graph_mega --knob decode_mega.MLP_PROJ_PREFETCH=1 --name pf1 > $D/pf1.log 2>&1
timeout 70 $B --modes graph_mega --knob decode_mega.MLP_PROJ_PREFETCH=2 --name pf2 > $D/pf2.log 2>&1
timeout 70 $B --modes graph_mega --name pf0b > $D/pf0b.log 2>&1
for k in 1 2; do
timeout 50 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 --knob decode_mega.MLP_PROJ_PREFETCH=$k > $D/barriers_pf$k.txt 2>&1
done
cd $OUT && tar czf c2.tgz c2

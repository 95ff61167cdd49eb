#!/bin/bash
# session 22 call 7: the next layer's cache rows into L2 during D, E, F, A (CACHE_AHEAD 0 / 256 / 1024), batch 32 / 16k.
export PYTHONUNBUFFERED=1
D=$OUT/c7; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
T0=$(date +%s)
B="python3 -m scripts.bench_decode --modes graph_mega --contexts 16384 --batches 32 --out_dir $D --variants tucker_8_64_64,tucker_shared_8_64_64"
timeout 40 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha1 > $D/mha1.log 2>&1
timeout 50 $B --name ahead0 > $D/ahead0.log 2>&1
(cd $OUT && tar czf c7.tgz c7)
timeout 50 $B --knob decode_wide.CACHE_AHEAD=256 --name ahead256 > $D/ahead256.log 2>&1
(cd $OUT && tar czf c7.tgz c7)
timeout 50 $B --knob decode_wide.CACHE_AHEAD=1024 --name ahead1024 > $D/ahead1024.log 2>&1
echo "done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c7.tgz c7)

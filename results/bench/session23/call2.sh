#!/bin/bash
# session 23 call 2: per-loop pipelining depth (LAYER_STAGES, ATTN_STAGES), BK 256; barrier profiles; MHA twice.
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $D/gpu.txt
T0=$(date +%s)
ARGS="--modes graph_mega --contexts 16384 --batches 32 --variants tucker_8_64_64,tucker_shared_8_64_64"
MHA="python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384"
t() { echo "$1 $(( $(date +%s) - T0 ))s" >> $D/times.txt; }
b() { n=$1; shift; timeout 60 python3 -m scripts.bench_decode $ARGS --out_dir $D --name $n "$@" > $D/$n.log 2>&1; t $n; }
timeout 40 $MHA --out_dir $D --name mha1 > $D/mha1.log 2>&1; t mha1
b new
b layer7 --knob decode_wide.LAYER_STAGES=7
b layer5 --knob decode_wide.LAYER_STAGES=5
(cd $OUT && tar czf c2.tgz c2)
b attn6 --knob decode_wide.ATTN_STAGES=6
b attn3 --knob decode_wide.ATTN_STAGES=3
b bk256 --knob decode_wide.BK=256 --knob decode_wide.STAGES=3 --knob decode_wide.LAYER_STAGES=4 --knob decode_wide.ATTN_STAGES=4
b layer9 --knob decode_wide.LAYER_STAGES=9 --knob decode_wide.STAGES=3 --knob decode_wide.ATTN_STAGES=4
b new2
(cd $OUT && tar czf c2.tgz c2)
timeout 40 $MHA --out_dir $D --name mha2 > $D/mha2.log 2>&1; t mha2
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,tucker_shared_8_64_64 --batch 32 --context 16384 > $D/barriers_new.txt 2>&1; t barriers_new
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,tucker_shared_8_64_64 --batch 32 --context 16384 --knob decode_wide.LAYER_STAGES=7 > $D/barriers_layer7.txt 2>&1; t barriers_layer7
(cd $OUT && tar czf c2.tgz c2)

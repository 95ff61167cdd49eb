#!/bin/bash
# session 24 call 6: decode_wide's LM head at 32 columns a tile (BN_LM=32) against the default 64, alternating, batch 32 at 16k
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
for i in 1 2; do
  for k in 64 32; do
    timeout 45 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 32 \
        --contexts 16384 --knob decode_wide.BN_LM=$k --out_dir $D --name bnlm${k}_$i > $D/log_bnlm${k}_$i.txt 2>&1
    echo "rc $?" >> $D/log_bnlm${k}_$i.txt
  done
done
(cd $OUT && tar czf c6.tgz c6)

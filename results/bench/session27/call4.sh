#!/bin/bash
# session 27 call 4: the final tree's decode speed, the six main variants, default step and one launch, batch 1 and 32,
# 1k-32k cached tokens (learned positions): the data of results/bench/decode_final.png (scripts/plot_decode.py).
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 480 python3 -m scripts.bench_decode \
    --variants mha,gqa4,mqa,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged,graph_mega \
    --batches 1,32 --contexts 1024,4096,16384,32768 --out_dir $D --name decode_final > $D/log.txt 2>&1
echo "rc $?" >> $D/log.txt
(cd $OUT && tar czf c4.tgz c4)

#!/bin/bash
# session 27 call 3: the final tree's one-launch step with RoPE after session 26's review mends (the rope-2 B1 step as
# one helper, _group_step_rope; 32-wide latents at least), against the default step, batch 1 and 32, 4k and 16k.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 200 python3 -m scripts.bench_decode --rope --variants mha,tucker_8_64_64,tucker_shared_8_64_64 \
    --modes graph_merged,graph_mega --batches 1,32 --contexts 4096,16384 --out_dir $D --name rope > $D/log_rope.txt 2>&1
echo "rc $?" >> $D/log_rope.txt
(cd $OUT && tar czf c3.tgz c3)

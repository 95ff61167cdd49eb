#!/bin/bash
# session 21 call 2: decode_wide phase by phase at batch 32 and 16k (profile_mega), STAGES 3 and 4, BLOCK_N 128
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
git log --oneline | head -1 > $D/commit.txt
for kv in decode_wide.STAGES=3 decode_wide.STAGES=4 decode_mega.BLOCK_N=128; do
  timeout 100 python3 -m scripts.profile_mega --variants tucker_8_64_64,tucker_shared_8_64_64 --batch 32 --context 16384 --steps 5 --knob $kv > $D/phases_${kv//=/_}.txt 2>&1
  (cd $OUT && tar czf c2.tgz c2)
done

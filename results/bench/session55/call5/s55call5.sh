#!/usr/bin/env bash
# Session 55 call 5 (tree in tree.txt): where the one-launch step's time goes at 1-4 sequences, phase by phase from
# its barrier stamps (scripts.profile_mega --barriers), Tucker [8,64,64] and MQA at 4k cached: which phases grow
# from 2 to 3-4 sequences (call 1: +0.11 ms a step).
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c5; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
for b in 1 2 3 4; do
  timeout 100 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mqa --context 4096 --batch $b \
      --steps 20 > $D/barriers_b$b.txt 2>&1
  echo "b$b rc=$?" >> $O/rc.txt
done
tar -C $O -czf $O/files.tgz files && rm -rf $D

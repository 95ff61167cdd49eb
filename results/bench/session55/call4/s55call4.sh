#!/usr/bin/env bash
# Session 55 call 4 (tree in tree.txt): the user-facing CUDA paths (scripts/gpu_smoke.sh) on the session's tree, last
# run in session 50 (076266f); decode code changed since (sessions 51-54: decode_linear's row rules, Tucker's
# per-batch forms, the split kernel's early launch), which sample.py's steps reach.
set -u
export PYTHONUNBUFFERED=1 TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c4; F=$O/files; mkdir -p $F
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $F/gpu.txt 2>&1
date +%s > $F/t0.txt
OUT=$F STEP_TIMEOUT=120 timeout 540 bash scripts/gpu_smoke.sh > $F/smoke.log 2>&1
echo "smoke=$?" >> $O/rc.txt
date +%s >> $F/t0.txt
cat $F/smoke/rc.txt >> $O/rc.txt
echo "seconds: $(( $(tail -1 $F/t0.txt) - $(head -1 $F/t0.txt) ))" >> $O/rc.txt
rm -rf $F/smoke/data $F/smoke/*/ckpt*.pt
tar -C $O -czf $O/files.tgz files && rm -rf $F

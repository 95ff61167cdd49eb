#!/usr/bin/env bash
# session 45 call 2: the user paths on the session's final tree (scripts/gpu_smoke.sh)
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
C=$OUT/c2; mkdir -p $C
OUT=$C bash scripts/gpu_smoke.sh > $C/smoke.log 2>&1
echo "smoke rc=$?" > $C/rc.txt; cat $C/smoke/rc.txt >> $C/rc.txt

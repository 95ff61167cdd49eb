#!/usr/bin/env bash
# session 46 call 3: gpu_smoke.sh and gpu_session.sh with their new GPU prechecks and --help, on the session's final tree
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
C=$OUT/c3; mkdir -p $C
{ bash scripts/gpu_smoke.sh --help | head -3; echo "smoke --help rc=${PIPESTATUS[0]}"; bash scripts/gpu_session.sh --help | head -3; echo "session --help rc=${PIPESTATUS[0]}"; } > $C/help.log 2>&1
OUT=$C STEP_TIMEOUT=150 bash scripts/gpu_smoke.sh > $C/smoke.log 2>&1
echo "smoke rc=$?" > $C/rc.txt; cat $C/smoke/rc.txt >> $C/rc.txt
for f in $C/smoke/*.err; do n=$(basename $f .err); grep -q "^$n rc=0$" $C/smoke/rc.txt || { echo "=== $n"; tail -20 $f; }; done > $C/smoke_failed.log
rm -rf $C/smoke

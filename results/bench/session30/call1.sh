#!/bin/bash
# session 30 call 1: the CUDA tests not re-run since sessions 27-28 (decode_wide, master_adamw, decode_mega),
# each line time-stamped so that a cut-off run still says how far it got and at what pace.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%H:%M:%S)" "$l"; done; }
for f in test_decode_wide test_master_adamw test_decode_mega; do
  case $f in test_decode_wide) lim=170;; test_master_adamw) lim=90;; *) lim=290;; esac
  timeout $lim python3 -m pytest -v -rs -p no:cacheprovider tests/$f.py -k cuda --durations=15 2>&1 | stamp > $D/$f.txt
  echo "rc ${PIPESTATUS[0]}" >> $D/$f.txt
done
cd $OUT && tar czf c1.tgz c1

#!/bin/bash
# session 23 call 6: Nsight Compute on B1 alone (layer 0's phase launched by itself), the final kernel.
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
T0=$(date +%s)
for v in tucker_8_64_64 tucker_shared_8_64_64; do
  timeout 100 ncu --profile-from-start off --clock-control none --kernel-name regex:step_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
    --section Occupancy --section SourceCounters --print-details all \
    python3 -m scripts.profile_mega --profiled_step --variants $v --batch 32 --context 16384 > $D/ncu_b1_$v.txt 2>&1
  echo "$v rc $? $(( $(date +%s) - T0 ))s" >> $D/times.txt
done
(cd $OUT && tar czf c6.tgz c6)

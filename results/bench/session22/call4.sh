#!/bin/bash
# session 22 call 4 (final tree): CUDA tests; Nsight Compute on one phased step (layer 0's phases) for Tucker and
# Tucker shared at batch 32 / 16k; the decode table at batch 8 and 32, 4k and 16k (default step vs one launch);
# MHA's default step (the ratios' denominator) before and after; two knob rows.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
T0=$(date +%s)
timeout 130 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $? $(( $(date +%s) - T0 ))s" >> $D/tests_wide.log
(cd $OUT && tar czf c4.tgz c4)
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 8,32 --contexts 4096,16384 --out_dir $D --name mha1 > $D/mha1.log 2>&1
timeout 120 python3 -m scripts.bench_decode --variants mqa,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged,graph_mega --batches 8,32 --contexts 4096,16384 --out_dir $D --name wide > $D/wide.log 2>&1
echo "table done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c4.tgz c4)
for v in tucker_8_64_64 tucker_shared_8_64_64; do
  timeout 75 ncu --profile-from-start off --clock-control none --kernel-name regex:step_kernel --launch-count 7 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats --section Occupancy \
    python3 -m scripts.profile_mega --profiled_step --variants $v --batch 32 --context 16384 > $D/ncu_$v.txt 2>&1
  echo "ncu $v rc $? $(( $(date +%s) - T0 ))s" >> $D/times.txt
  (cd $OUT && tar czf c4.tgz c4)
done
B="python3 -m scripts.bench_decode --modes graph_mega --contexts 16384 --batches 32 --out_dir $D"
timeout 50 $B --variants tucker_8_64_64 --knob "decode_wide.ATTN_ROWS={False: 128, True: 128}" --name tucker_rows128 > $D/tucker_rows128.log 2>&1
timeout 50 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --knob decode_wide.STAGES=3 --name stages3 > $D/stages3.log 2>&1
timeout 50 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --name repeat > $D/repeat.log 2>&1
timeout 40 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha2 > $D/mha2.log 2>&1
echo "all done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c4.tgz c4)

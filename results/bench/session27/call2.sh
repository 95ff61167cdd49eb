#!/bin/bash
# session 27 call 2: B1's items claimed from a counter as programs free up (decode_wide.B1_QUEUE), smaller items
# (SPLIT_ITEMS), swept at batch 32 and 16k, Tucker and Tucker shared, one launch; the CUDA tests of B1's options;
# call 1's L2 prefetch, placed phase by phase (profile_mega --barriers, off and one in 8 steps).
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
run() {  # name, knobs...
  name=$1; shift
  timeout 50 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega \
      --batches 32 --contexts 16384 --out_dir $D --name $name "$@" > $D/log_$name.txt 2>&1
  echo "rc $?" >> $D/log_$name.txt
}
run base_a
run q1 --knob decode_wide.B1_QUEUE=True
run q2 --knob decode_wide.B1_QUEUE=True --knob decode_wide.SPLIT_ITEMS=2
run q3 --knob decode_wide.B1_QUEUE=True --knob decode_wide.SPLIT_ITEMS=3
run s3 --knob decode_wide.SPLIT_ITEMS=3
run q4m1 --knob decode_wide.B1_QUEUE=True --knob decode_wide.SPLIT_ITEMS=4 --knob decode_wide.MERGE_HEADS=1
run base_b
timeout 130 python3 -m pytest -q tests/test_decode_wide.py -k "cuda and b1_options" > $D/cuda_tests.txt 2>&1
echo "rc $?" >> $D/cuda_tests.txt
for pf in 0 8; do
  timeout 45 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --batch 32 --context 16384 \
      --knob decode_wide.PREFETCH_EVERY=$pf > $D/log_barriers_pf$pf.txt 2>&1
  echo "rc $?" >> $D/log_barriers_pf$pf.txt
done
(cd $OUT && tar czf c2.tgz c2)

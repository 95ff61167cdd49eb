#!/bin/bash
# session 27 call 1: the review mends' CUDA tests (rope-2 latents, session 26) and the new L2 prefetch of B1's rows
# (decode_wide.PREFETCH_EVERY); then the prefetch swept at batch 32 and 16k, Tucker and Tucker shared, one launch.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 200 python3 -m pytest -q tests/test_decode_mega.py tests/test_decode_wide.py -k "cuda and (shared_rope or latent or prefetch)" > $D/cuda_tests.txt 2>&1
echo "rc $?" >> $D/cuda_tests.txt
run() {  # name, knobs...
  name=$1; shift
  timeout 50 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega \
      --batches 32 --contexts 16384 --out_dir $D --name $name "$@" > $D/log_$name.txt 2>&1
  echo "rc $?" >> $D/log_$name.txt
}
run pf0_a
run pf4 --knob decode_wide.PREFETCH_EVERY=4
run pf2 --knob decode_wide.PREFETCH_EVERY=2
run pf8 --knob decode_wide.PREFETCH_EVERY=8
run pf0_b
run pf4_e --knob decode_wide.PREFETCH_EVERY=4 --knob decode_wide.PREFETCH_PHASE=5
run pf4_normal --knob decode_wide.PREFETCH_EVERY=4 --knob decode_wide.PREFETCH_EVICT_LAST=False
run pf1 --knob decode_wide.PREFETCH_EVERY=1
(cd $OUT && tar czf c1.tgz c1)

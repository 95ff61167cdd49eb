#!/bin/bash
# session 21 call 7: decode_wide's pipelining and program shape at batch 32 and 16k (knobs only, no code change)
export PYTHONUNBUFFERED=1
D=$OUT/c7; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
timeout 50 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name merged > $D/merged.log 2>&1
timeout 30 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 32 --contexts 16384 --out_dir $D --name mega > $D/mega.log 2>&1
(cd $OUT && tar czf c7.tgz c7)
for kv in "STAGES=5" "STAGES=3" "BK=256" "NUM_WARPS=8 --knob decode_wide.PROGRAMS_PER_SM=1" "BK=64 --knob decode_wide.STAGES=6"; do
  name=$(echo "$kv" | sed 's/ --knob decode_wide\./_/; s/=/_/g')
  timeout 30 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 32 --contexts 16384 --knob decode_wide.$kv --out_dir $D --name mega_$name > $D/mega_$name.log 2>&1
  (cd $OUT && tar czf c7.tgz c7)
done
timeout 30 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 32 --contexts 16384 --out_dir $D --name mega_again > $D/mega_again.log 2>&1
(cd $OUT && tar czf c7.tgz c7)

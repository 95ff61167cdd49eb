#!/bin/bash
# session 25 call 3: decode_wide knobs not measured before, batch 32 at 16k, alternating with the defaults:
# the shared latent's B1 in 8 groups (two a warp: two independent online softmaxes interleaved) of 16 rows (128 a
# step) or of 32 rows (256 a step); B2 at 4 (sequence, head) pairs a program. MHA's default step as the denominator.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
B="python3 -m scripts.bench_decode --modes graph_mega --batches 32 --contexts 16384"
timeout 80 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 \
    --out_dir $D --name mha > $D/log_mha.txt 2>&1; echo "rc $?" >> $D/log_mha.txt
for i in 1 2; do
  timeout 60 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --out_dir $D --name default_$i > $D/log_default_$i.txt 2>&1
  echo "rc $?" >> $D/log_default_$i.txt
  timeout 50 $B --variants tucker_shared_8_64_64 --knob "decode_wide.ATTN_GROUPS={False: 2, True: 8}" \
      --out_dir $D --name g8r128_$i > $D/log_g8r128_$i.txt 2>&1; echo "rc $?" >> $D/log_g8r128_$i.txt
  timeout 50 $B --variants tucker_shared_8_64_64 --knob "decode_wide.ATTN_GROUPS={False: 2, True: 8}" \
      --knob "decode_wide.ATTN_ROWS={False: 64, True: 256}" --out_dir $D --name g8r256_$i > $D/log_g8r256_$i.txt 2>&1
  echo "rc $?" >> $D/log_g8r256_$i.txt
  timeout 60 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --knob decode_wide.MERGE_HEADS=4 \
      --out_dir $D --name mh4_$i > $D/log_mh4_$i.txt 2>&1; echo "rc $?" >> $D/log_mh4_$i.txt
done
(cd $OUT && tar czf c3.tgz c3)

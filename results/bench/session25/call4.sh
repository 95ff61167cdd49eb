#!/bin/bash
# session 25 call 4: MLA in the one-launch decode step (new): its CUDA tests, then MLA shared 128 graph_mega against
# its default step (graph_merged) at batch 1 and 32, 4k and 16k; the shared latent's B1 at 64 rows a step (4 groups
# of 16: no spills at dcK 128) against the default 128, alternating; MHA's default step as the denominator.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 120 python3 -m pytest -q tests/test_decode_wide.py tests/test_decode_mega.py -k "cuda and mla" > $D/cuda_tests.txt 2>&1
echo "rc $?" >> $D/cuda_tests.txt
timeout 70 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 \
    --out_dir $D --name mha > $D/log_mha.txt 2>&1; echo "rc $?" >> $D/log_mha.txt
timeout 150 python3 -m scripts.bench_decode --variants mla_shared128 --modes graph_merged,graph_mega --batches 1,32 \
    --contexts 4096,16384 --out_dir $D --name mla > $D/log_mla.txt 2>&1; echo "rc $?" >> $D/log_mla.txt
for i in 1 2; do
  timeout 55 python3 -m scripts.bench_decode --variants mla_shared128 --modes graph_mega --batches 32 --contexts 16384 \
      --knob "decode_wide.ATTN_ROWS={False: 64, True: 64}" --out_dir $D --name mla_r64_$i > $D/log_mla_r64_$i.txt 2>&1
  echo "rc $?" >> $D/log_mla_r64_$i.txt
  [ $i = 1 ] && { timeout 55 python3 -m scripts.bench_decode --variants mla_shared128 --modes graph_mega --batches 32 \
      --contexts 16384 --out_dir $D --name mla_r128 > $D/log_mla_r128.txt 2>&1; echo "rc $?" >> $D/log_mla_r128.txt; }
done
(cd $OUT && tar czf c4.tgz c4)

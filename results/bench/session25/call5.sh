#!/bin/bash
# session 25 call 5: MLA in the one-launch step at its new default rows (attn_rows: 64 for the shared latent of 128):
# the CUDA tests of decode_wide / decode_mega's MLA cases, then MLA shared 128's default step (graph_merged) against
# the one-launch step (graph_mega) at batch 32, 4k and 16k, twice, with MHA's default step at 16k as the denominator.
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 120 python3 -m pytest -q tests/test_decode_wide.py tests/test_decode_mega.py -k "cuda and mla" > $D/cuda_tests.txt 2>&1
echo "rc $?" >> $D/cuda_tests.txt
for i in 1 2; do
  timeout 70 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 \
      --out_dir $D --name mha_$i > $D/log_mha_$i.txt 2>&1; echo "rc $?" >> $D/log_mha_$i.txt
  timeout 90 python3 -m scripts.bench_decode --variants mla_shared128 --modes graph_merged,graph_mega --batches 32 \
      --contexts 4096,16384 --out_dir $D --name mla_$i > $D/log_mla_$i.txt 2>&1; echo "rc $?" >> $D/log_mla_$i.txt
done
(cd $OUT && tar czf c5.tgz c5)

#!/usr/bin/env bash
# Session 51 call 3: Tucker's factored decode step (merged_decode off: LLaMA-1B's Tucker [32,128,128] by default)
# through decode_linear's kernels (the norm inside W_down's GEMV, G_q and G_o as GEMVs) against HEAD's (.carry/base:
# add_norm, then cuBLAS for W_down, G_q and G_o), on the same GPU; both decode forms (graph: factored, graph_merged),
# LLaMA-1B at batch 1 / 4k and GPT-2's Tuckers at batch 1 and 32; the CUDA tests of test_decode.py on the new tree.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c3; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
L=(--suite llama1b --variants gqa8,tucker_32_128_128,tucker_32_128_64,tucker_32_64_64 --modes graph,graph_merged
   --batches 1 --contexts 4096)
G=(--variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph,graph_merged --batches 1,32 --contexts 4096)
for t in base new; do
  if [ $t = base ]; then C="cd .carry/base &&"; else C=""; fi
  timeout 150 bash -c "$C python3 -m scripts.bench_decode ${L[*]} --out_dir $D --name llama_$t" > $D/llama_$t.log 2>&1
  echo "llama_$t rc=$?" >> $O/rc.txt
  timeout 100 bash -c "$C python3 -m scripts.bench_decode ${G[*]} --out_dir $D --name gpt2_$t" > $D/gpt2_$t.log 2>&1
  echo "gpt2_$t rc=$?" >> $O/rc.txt
done
timeout 100 python3 -m scripts.bench_decode --suite llama1b --variants gqa8,tucker_32_128_128 --modes graph,graph_merged \
  --batches 1 --contexts 4096 --profile_rows 20 --out_dir $D --name llama_profile > $D/llama_profile.log 2>&1
echo "profile rc=$?" >> $O/rc.txt
timeout 120 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode.py -k cuda > $D/test_decode.txt 2>&1
echo "tests rc=$? $(tail -1 $D/test_decode.txt)" >> $O/rc.txt
for f in $D/llama_base.md $D/llama_new.md $D/gpt2_base.md $D/gpt2_new.md; do
  echo "== $(basename $f)" >> $O/rc.txt; grep -E '^\| (GQA|Tucker)' $f | cut -d'|' -f2-6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

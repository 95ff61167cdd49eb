#!/usr/bin/env bash
# Session 53 call 8 (tree in tree.txt): decode_linear's GEMV against cuBLAS at 2-4 sequences. Call 7 found LLaMA-1B's
# batch-4 step (GEMV) ~1.7x its batch-5 step (cuBLAS). graph_default at batches 2, 3, 4 (4k cached), the defaults
# against --knob decode_linear.MAX_ROWS=1 (every matmul of 2+ rows on cuBLAS; Tucker's per-batch form follows it),
# LLaMA-1B GQA-8 / Tucker [32,64,64] / [32,128,128] and GPT-2 MHA / Tucker [8,64,64].
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c8; D=$O/files; mkdir -p $D
L="--suite llama1b --variants gqa8,tucker_32_64_64,tucker_32_128_128 --modes graph_default --contexts 4096 --batches 2,3,4 --out_dir $D"
G="--variants mha,tucker_8_64_64 --modes graph_default --contexts 4096 --batches 2,3,4 --out_dir $D"
run() { local name=$1; shift; timeout 70 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run l_def $L
run l_cublas $L --knob decode_linear.MAX_ROWS=1
run g_def $G
run g_cublas $G --knob decode_linear.MAX_ROWS=1
for n in l_def l_cublas g_def g_cublas; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,4,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

#!/usr/bin/env bash
# Session 54 call 7 (tree in tree.txt: 0305d9f + decode_linear.PAIR_ROWS_MAX_K and MANY_ROWS_MAX_WEIGHT, both 0 = as
# before): the GEMV against cuBLAS for the large weights at 1-4 rows (.carry/calls/s54micro3.py); the steps at 2-4
# sequences with 3-4 rows in pairs (PAIR_ROWS_MAX_K=1024), and also the weights above 32M / 8M elements on cuBLAS at
# 2+ rows (MANY_ROWS_MAX_WEIGHT), the default first and last.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c7; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
timeout 150 python3 .carry/calls/s54micro3.py > $D/micro3.txt 2>&1; echo "micro3 rc=$?" >> $O/rc.txt
G="--variants mha,tucker_8_64_64,tucker_8_128_128 --modes graph_default --contexts 4096 --batches 2,3,4 --out_dir $D"
L="--suite llama1b --variants gqa8,tucker_32_128_128,tucker_32_64_64 --modes graph_default --contexts 4096 --batches 2,3,4 --out_dir $D"
run() { local name=$1; shift; timeout 120 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
P="--knob decode_linear.PAIR_ROWS_MAX_K=1024"
run g_def1 $G
run g_p $G $P
run g_pw32 $G $P --knob decode_linear.MANY_ROWS_MAX_WEIGHT=33554432
run g_def2 $G
run l_def1 $L
run l_p $L $P
run l_pw32 $L $P --knob decode_linear.MANY_ROWS_MAX_WEIGHT=33554432
run l_pw8 $L $P --knob decode_linear.MANY_ROWS_MAX_WEIGHT=8388608
for n in g_def1 g_p g_pw32 g_def2 l_def1 l_p l_pw32 l_pw8; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,4,6 >> $O/rc.txt; done
cat $D/micro3.txt >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $D

#!/usr/bin/env bash
# Session 54 call 6 (tree in tree.txt: 0305d9f + decode_linear.PAIR_ROWS_MAX_K, default 0 = as before): the GEMV at
# 3-4 rows config by config (.carry/calls/s54micro2.py); the steps at 3-4 sequences with rows in pairs where
# K <= 128 / 1024 (knob PAIR_ROWS_MAX_K) against the default, default first and last.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c6; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
timeout 200 python3 .carry/calls/s54micro2.py > $D/micro2.txt 2>&1; echo "micro2 rc=$?" >> $O/rc.txt
G="--variants mha,tucker_8_128_128,tucker_8_64_64,tucker_shared_8_128_128 --modes graph_default --contexts 4096 --batches 3,4 --out_dir $D"
L="--suite llama1b --variants gqa8,tucker_32_128_128,tucker_32_64_64 --modes graph_default --contexts 4096 --batches 3,4 --out_dir $D"
run() { local name=$1; shift; timeout 120 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run g_def1 $G
run g_p128 $G --knob decode_linear.PAIR_ROWS_MAX_K=128
run g_p1024 $G --knob decode_linear.PAIR_ROWS_MAX_K=1024
run g_def2 $G
run l_def $L
run l_p128 $L --knob decode_linear.PAIR_ROWS_MAX_K=128
for n in g_def1 g_p128 g_p1024 g_def2 l_def l_p128; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,4,6 >> $O/rc.txt; done
cat $D/micro2.txt >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $D

#!/usr/bin/env bash
# Session 54 call 9 (tree in tree.txt: 4c9dd86 + decode_linear.WIDE_ROWS_MAX_WEIGHT, default 0 = 4c9dd86's rule):
# at 3-4 rows, K > 1024 served in pairs where N x K is at most 1M (a factored Tucker's W_down and G_o) or 4M (also
# GPT-2's MLP down-projection, 2.4M) against cuBLAS there, graph_default at 4k, default first and last.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c9; D=$O/files; mkdir -p $D
L="--suite llama1b --variants gqa8,tucker_32_128_128,tucker_32_64_64 --modes graph_default --contexts 4096 --batches 3,4 --out_dir $D"
G="--variants mha,tucker_8_64_64,tucker_8_128_128 --modes graph_default --contexts 4096 --batches 3,4 --out_dir $D"
run() { local name=$1; shift; timeout 100 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run l_def1 $L
run l_1m $L --knob decode_linear.WIDE_ROWS_MAX_WEIGHT=1048576
run l_4m $L --knob decode_linear.WIDE_ROWS_MAX_WEIGHT=4194304
run l_def2 $L
run g_def $G
run g_4m $G --knob decode_linear.WIDE_ROWS_MAX_WEIGHT=4194304
for n in l_def1 l_1m l_4m l_def2 g_def g_4m; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,4,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

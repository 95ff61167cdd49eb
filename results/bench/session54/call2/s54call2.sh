#!/usr/bin/env bash
# Session 54 call 2 (tree in tree.txt: 0305d9f plus decode_linear.WIDE_ROWS_MAX_NK, default 0 = the rule as it was):
# decode_linear's GEMV at 3-4 rows for K > 1024 where the weight's N x K is small (knob WIDE_ROWS_MAX_NK 1M: a factored
# Tucker's W_down and G_o; 8M: also GQA-8's qkv and output projections, Tucker's merged matrices, GPT-2's MLP
# down-projection) against cuBLAS there (the default), graph_default at 4k, default first and last.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c2; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
L="--suite llama1b --variants gqa8,tucker_32_128_128,tucker_32_64_64 --modes graph_default --contexts 4096 --batches 3,4 --out_dir $D"
F="--suite llama1b --variants tucker_32_64_64 --modes graph,graph_merged --contexts 4096 --batches 3,4 --out_dir $D"
G="--variants mha,tucker_8_64_64,tucker_8_128_128 --modes graph_default --contexts 4096 --batches 3,4 --out_dir $D"
run() { local name=$1; shift; timeout 120 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
K1="--knob decode_linear.WIDE_ROWS_MAX_NK=1048576"
K8="--knob decode_linear.WIDE_ROWS_MAX_NK=8388608"
run l_def1 $L
run l_1m $L $K1
run l_8m $L $K8
run l_def2 $L
run f_1m $F $K1
run g_def $G
run g_1m $G $K1
run g_8m $G $K8
for n in l_def1 l_1m l_8m l_def2 f_1m g_def g_1m g_8m; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,3,4,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

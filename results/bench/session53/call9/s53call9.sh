#!/usr/bin/env bash
# Session 53 call 9 (tree in tree.txt): decode_linear's WIDE_ROWS_MAX_K (3-4 rows served only where K <= 1024, wider on
# cuBLAS) against the rule before (--knob decode_linear.WIDE_ROWS_MAX_K=1073741824), graph_default at 4k: LLaMA-1B GQA-8
# and Tucker [32,64,64] at batch 4, GPT-2 MHA and Tucker [8,64,64] at 3 and 4; then test_decode_linear.py's CUDA tests.
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c9; D=$O/files; mkdir -p $D
L="--suite llama1b --variants gqa8,tucker_32_64_64 --modes graph_default --contexts 4096 --batches 4 --out_dir $D"
G="--variants mha,tucker_8_64_64 --modes graph_default --contexts 4096 --batches 3,4 --out_dir $D"
run() { local name=$1; shift; timeout 45 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run l_new $L
run l_old $L --knob decode_linear.WIDE_ROWS_MAX_K=1073741824
run g_new $G
run g_old $G --knob decode_linear.WIDE_ROWS_MAX_K=1073741824
for n in l_new l_old g_new g_old; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,4,6 >> $O/rc.txt; done
timeout 60 python3 -m pytest -q -x --gpu_only tests/test_decode_linear.py -p no:cacheprovider > $D/tests.log 2>&1
echo "tests rc=$?" >> $O/rc.txt; tail -2 $D/tests.log >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $D

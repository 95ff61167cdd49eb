#!/usr/bin/env bash
# Session 53 call 6 (tree in tree.txt): an upper bound, not a form to keep. What would LLaMA-1B Tucker [32,128,128]'s
# batch-1 step gain if G_o's GEMV cost nothing? .carry/hack = HEAD with that GEMV left out (y_lat = the first r~2
# columns of the attention output: wrong math, the bench's check off), against HEAD, alternating; GQA-8 beside.
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c6; D=$O/files; mkdir -p $D
A="--suite llama1b --variants gqa8,tucker_32_128_128 --modes graph_default --batches 1 --contexts 4096 --out_dir $D"
run() { local name=$1; shift; timeout 50 python3 -m scripts.bench_decode $A --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
runh() { local name=$1; shift; (cd .carry/hack && timeout 50 python3 -m scripts.bench_decode $A --name $name "$@") > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run def1
runh nogo1
run def2
runh nogo2
for n in def1 nogo1 def2 nogo2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

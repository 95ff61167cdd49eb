#!/usr/bin/env bash
# Session 53 call 7 (tree in tree.txt): where the per-batch form switches. LLaMA-1B Tucker [32,128,64] and [32,64,64]
# factored (graph) and merged (graph_merged) at batches 2, 4 and 5 (4k cached): the default takes the factored form at
# 1-4 sequences (decode_linear's GEMV) and the merged one from 5 (cuBLAS).
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c7; D=$O/files; mkdir -p $D
A="--suite llama1b --variants tucker_32_128_64,tucker_32_64_64 --modes graph,graph_merged,graph_default --contexts 4096 --out_dir $D"
run() { local name=$1; shift; timeout 120 python3 -m scripts.bench_decode $A --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run forms1 --batches 2,4,5
run forms2 --batches 2,4,5
for n in forms1 forms2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2-6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

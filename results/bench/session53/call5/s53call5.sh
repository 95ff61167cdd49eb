#!/usr/bin/env bash
# Session 53 call 5 (tree in tree.txt): split-kernel knobs not swept for 32-head groups, LLaMA-1B GQA-8 and Tucker
# [32,128,128] at batch 1 / 4k (default forms), defaults first and last: decode_attention's BLOCK_N 32 (cache rows a
# loop step), NUM_STAGES 2 and 4 (loads in flight), CTAS_PER_SM 8 (split programs an SM).
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c5; D=$O/files; mkdir -p $D
B="python3 -m scripts.bench_decode --suite llama1b --variants gqa8,tucker_32_128_128 --modes graph_default --batches 1 --contexts 4096 --out_dir $D"
run() { local name=$1; shift; timeout 50 $B --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run def1
run bn32 --knob BLOCK_N=32
run st2 --knob NUM_STAGES=2
run st4 --knob NUM_STAGES=4
run cta8 --knob CTAS_PER_SM=8
run def2
for n in def1 bn32 st2 st4 cta8 def2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

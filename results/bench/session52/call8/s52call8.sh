#!/usr/bin/env bash
# Session 52 call 8 (tree in tree.txt): with what device time was left, three global knobs on LLaMA-1B GQA-8 and
# Tucker [32,128,128] at batch 1 / 4k (default forms), defaults first and last: decode_linear's TILE 16384 (more
# columns a program), PROGRAMS_PER_SM 4, and decode_attention's MIN_SPLIT_TOKENS_WIDE 64 beside pdl_split.
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c8; D=$O/files; mkdir -p $D
B="python3 -m scripts.bench_decode --suite llama1b --variants gqa8,tucker_32_128_128 --modes graph_default --batches 1 --contexts 4096 --out_dir $D"
run() { local name=$1; shift; timeout 50 $B --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run def1
run tile16k --knob decode_linear.TILE=16384
run pps4 --knob decode_linear.PROGRAMS_PER_SM=4
run split64 --knob MIN_SPLIT_TOKENS_WIDE=64
run def2
for n in def1 tile16k pps4 split64 def2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

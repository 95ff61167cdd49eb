#!/usr/bin/env bash
# Session 51 call 6 (tree 6754e5d): decode_attention's split-kernel knobs for the 32-head groups of LLaMA-1B at batch 1
# / 4k (defaults; NUM_WARPS=2, the 4 warps the default gives 32-head groups halved; MIN_SPLIT_TOKENS_WIDE=64), each
# row in its default decode form (Tucker factored: graph; MLA merged: graph_merged), defaults first and last.
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c6; D=$O/files; mkdir -p $D
B="python3 -m scripts.bench_decode --suite llama1b --contexts 4096 --batches 1"
for knob in "" NUM_WARPS=2 MIN_SPLIT_TOKENS_WIDE=64 ""; do
  n=knob_${knob:-defaults}; n=${n//=/_}; [ -e $D/$n.md ] && n=${n}_2
  timeout 50 $B --variants gqa8,tucker_32_128_128,tucker_32_64_64,mqa --modes graph ${knob:+--knob $knob} \
    --out_dir $D --name $n > $D/$n.log 2>&1
  echo "$n rc=$?" >> $O/rc.txt
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2-6 >> $O/rc.txt
done
tar -C $O -czf $O/files.tgz files && rm -rf $D

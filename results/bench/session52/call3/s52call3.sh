#!/usr/bin/env bash
# Session 52 call 3 (tree in tree.txt): two launch-side knobs for LLaMA-1B Tucker [32,128,128]'s batch-1 step, each
# against the defaults (first and last): the split kernel launched with programmatic dependent launch too
# (decode_attention PDL=True; the default ('combine',) from session 8's GPT-2 sweep) and one-column GEMV blocks
# (decode_linear MIN_BLOCK_N=1: G_o's 4096 x 128 in 128 programs, not 64). LLaMA-1B batch 1 / 4k default forms;
# GPT-2 batch 1 / 4k with and without the split kernel's PDL.
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c3; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
B="python3 -m scripts.bench_decode --suite llama1b --variants gqa8,mqa,tucker_32_128_128,tucker_32_64_64 --modes graph_default --batches 1 --contexts 4096 --out_dir $D"
G="python3 -m scripts.bench_decode --variants mha,mqa,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_default --batches 1 --contexts 4096 --out_dir $D"
run() { local name=$1; shift; timeout 75 $B --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
rung() { local name=$1; shift; timeout 60 $G --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run def1
run pdl --knob PDL=True
run bn1 --knob decode_linear.MIN_BLOCK_N=1
run def2
rung gpt2_def
rung gpt2_pdl --knob PDL=True
for n in def1 pdl bn1 def2 gpt2_def gpt2_pdl; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2-6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

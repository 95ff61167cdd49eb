#!/usr/bin/env bash
# Session 53 call 3 (tree in tree.txt): the split kernel's PDL after Tucker's factored G_q by batch: knob
# model.TUCKER_PDL_SPLIT_ROWS=0 (never) against 64 (always), alternating, LLaMA-1B [32,128,128] (factored at every
# batch) at batches 8, 16, 32 and GPT-2 Tucker [8,128,128] / shared (factored: nH r3 > d) at 1, 8, 16, 32; 4k cached.
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c3; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
L="--suite llama1b --variants tucker_32_128_128 --modes graph_default --contexts 4096 --batches 8,16,32 --out_dir $D"
G="--variants tucker_8_128_128,tucker_shared_8_128_128 --modes graph_default --contexts 4096 --batches 1,8,16,32 --out_dir $D"
run() { local name=$1; shift; timeout 100 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run l_off1 $L --knob model.TUCKER_PDL_SPLIT_ROWS=0
run l_on1 $L --knob model.TUCKER_PDL_SPLIT_ROWS=64
run l_off2 $L --knob model.TUCKER_PDL_SPLIT_ROWS=0
run l_on2 $L --knob model.TUCKER_PDL_SPLIT_ROWS=64
run g_off1 $G --knob model.TUCKER_PDL_SPLIT_ROWS=0
run g_on1 $G --knob model.TUCKER_PDL_SPLIT_ROWS=64
run g_off2 $G --knob model.TUCKER_PDL_SPLIT_ROWS=0
run g_on2 $G --knob model.TUCKER_PDL_SPLIT_ROWS=64
for n in l_off1 l_on1 l_off2 l_on2 g_off1 g_on1 g_off2 g_on2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,4,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

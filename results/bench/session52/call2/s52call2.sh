#!/usr/bin/env bash
# Session 52 call 2 (tree in tree.txt): the output cores in the combine were 1.3% slower than G_o's GEMV (call 1).
# Sweep what the fused path's two kernels cost: U~2's program count for partial-sum inputs (decode_linear
# PARTS_MIN_BLOCK_N 16, 64: each program reads all 32 heads' sums, 16 KB) and the combine's p block
# (COMBINE_CORE_TILE 16384: one block of 128 output columns, the partials read once). LLaMA-1B batch 1 / 4k,
# default forms; G_o's GEMV (TUCKER_CORE_IN_COMBINE=False) first and last. Then both forms profiled.
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c2; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
B="python3 -m scripts.bench_decode --suite llama1b --variants gqa8,tucker_32_128_128,tucker_32_64_64 --modes graph_default --batches 1 --contexts 4096 --out_dir $D"
run() { local name=$1; shift; timeout 75 $B --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
OFF="--knob model.TUCKER_CORE_IN_COMBINE=False"
run off1 $OFF
run on1
run pbn16 --knob decode_linear.PARTS_MIN_BLOCK_N=16
run pbn64 --knob decode_linear.PARTS_MIN_BLOCK_N=64
run tile16k --knob COMBINE_CORE_TILE=16384
run both --knob decode_linear.PARTS_MIN_BLOCK_N=64 --knob COMBINE_CORE_TILE=16384
run off2 $OFF
P="python3 -m scripts.bench_decode --suite llama1b --variants tucker_32_128_128 --modes graph_default --batches 1 --contexts 4096 --profile_rows 20 --out_dir $D"
timeout 60 $P --name prof_on > $D/prof_on.log 2>&1; echo "prof_on rc=$?" >> $O/rc.txt
timeout 60 $P --name prof_off $OFF > $D/prof_off.log 2>&1; echo "prof_off rc=$?" >> $O/rc.txt
for n in off1 on1 pbn16 pbn64 tile16k both off2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2-6 >> $O/rc.txt; done
for n in prof_on prof_off; do echo "== $n" >> $O/rc.txt; grep -E "per iteration|^\| [0-9]" $D/$n.md >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

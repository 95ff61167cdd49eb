#!/usr/bin/env bash
# Session 54 call 1 (tree in tree.txt): every CUDA test (scripts.gpu_tests) on the tree with session 53's
# WIDE_ROWS_MAX_K rule; LLaMA-1B's [32,128,64] and [32,64,64] factored (graph) against merged (graph_merged) at 3 and 4
# sequences, where cuBLAS serves since that rule; LLaMA-1B GQA-8 and Tucker [32,128,128] at batch 1, two runs.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c1; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
M="--suite llama1b --variants tucker_32_128_64,tucker_32_64_64 --modes graph,graph_merged --contexts 4096 --batches 3,4 --out_dir $D"
B="--suite llama1b --variants gqa8,tucker_32_128_128 --modes graph_default --contexts 4096 --batches 1 --out_dir $D"
run() { local name=$1; shift; timeout 100 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
/usr/bin/time -v python3 -m scripts.gpu_tests --out_dir $D/gpu_tests --timeout 300 > $D/gpu_tests.log 2> $D/gpu_tests.time
echo "gpu_tests rc=$?" >> $O/rc.txt
tail -3 $D/gpu_tests.log >> $O/rc.txt
grep -E 'Elapsed' $D/gpu_tests.time >> $O/rc.txt
run l_forms $M
run l_b1_1 $B
run l_b1_2 $B
for n in l_forms l_b1_1 l_b1_2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,3,4,5,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

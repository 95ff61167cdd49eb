#!/usr/bin/env bash
# Session 54 call 10 (tree in tree.txt): the final rule (decode_linear.MAX_BLOCK_M = 2, MULTI_ROW_MAX_WEIGHT = 2^25, WIDE_ROWS_MAX_WEIGHT = 3M)
# against the tree before (.carry/base = 0305d9f), graph_default at 4k, new / base: GPT-2 MHA and three Tucker
# rows, LLaMA-1B GQA-8 and two Tucker rows, at 1-4 sequences. Then every CUDA test (scripts.gpu_tests).
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c10; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
G="--variants mha,tucker_8_64_64,tucker_shared_8_64_64,tucker_8_128_128 --modes graph_default --contexts 4096 --batches 1,2,3,4 --out_dir $D"
L="--suite llama1b --variants gqa8,tucker_32_128_128,tucker_32_64_64 --modes graph_default --contexts 4096 --batches 1,2,3,4 --out_dir $D"
run() { local name=$1; shift; timeout 120 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
runb() { local name=$1; shift; (cd .carry/base && timeout 120 python3 -m scripts.bench_decode --name $name "$@") > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run g_new1 $G
runb g_base $G
run l_new1 $L
runb l_base $L
for n in g_new1 g_base l_new1 l_base; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,4,6 >> $O/rc.txt; done
timeout 190 /usr/bin/time -v python3 -m scripts.gpu_tests --out_dir $D/gpu_tests --timeout 300 > $D/gpu_tests.log 2> $D/gpu_tests.time
echo "gpu_tests rc=$?" >> $O/rc.txt
tail -3 $D/gpu_tests.log >> $O/rc.txt
grep -E 'Elapsed' $D/gpu_tests.time >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $D

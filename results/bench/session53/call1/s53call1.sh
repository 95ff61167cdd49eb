#!/usr/bin/env bash
# Session 53 call 1 (tree in tree.txt): LLaMA-1B at batches 8 and 32 (4k cached): every Tucker row factored
# (graph) and merged (graph_merged), GQA-8 beside; the split kernel's PDL (pdl_split) at batch 32, where G_q is a
# cuBLAS GEMM, against .carry/base (HEAD with pdl_split=False); then every CUDA test (scripts.gpu_tests) on HEAD.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c1; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
V=gqa8,tucker_32_128_128,tucker_32_128_64,tucker_32_64_64
B="python3 -m scripts.bench_decode --suite llama1b --contexts 4096 --out_dir $D"
run() { local name=$1; shift; timeout 100 $B --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
runb() { local name=$1; shift; (cd .carry/base && timeout 100 python3 -m scripts.bench_decode --suite llama1b --contexts 4096 --out_dir $D --name $name "$@") > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run b32_new --variants tucker_32_128_128,tucker_32_64_64 --modes graph --batches 32
runb b32_nopdl --variants tucker_32_128_128,tucker_32_64_64 --modes graph --batches 32
run b32_new2 --variants tucker_32_128_128,tucker_32_64_64 --modes graph --batches 32
run forms8 --variants $V --modes graph,graph_merged --batches 8
run forms32 --variants $V --modes graph,graph_merged --batches 32
for n in b32_new b32_nopdl b32_new2 forms8 forms32; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2-6 >> $O/rc.txt; done
/usr/bin/time -v python3 -m scripts.gpu_tests --out_dir $D/gpu_tests --timeout 330 > $D/gpu_tests.log 2> $D/gpu_tests.time
echo "gpu_tests rc=$?" >> $O/rc.txt
tail -5 $D/gpu_tests.log >> $O/rc.txt
grep -E 'Elapsed|Maximum resident' $D/gpu_tests.time >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $D

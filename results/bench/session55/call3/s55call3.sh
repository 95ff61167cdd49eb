#!/usr/bin/env bash
# Session 55 call 3 (tree in tree.txt): every CUDA test (scripts.gpu_tests) on the session's tree, whose CUDA tests
# last ran on b11ee68 (session 54 call 10; db14463 since: TuckerAttention's down-projection width computed at build);
# then LLaMA-1B at batch 1, 4k cached, GQA-8 and Tucker [32,128,128] (the row at the margin), two runs alternating.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c3; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
timeout 220 /usr/bin/time -v python3 -m scripts.gpu_tests --out_dir $D/gpu_tests --timeout 300 > $D/gpu_tests.log 2> $D/gpu_tests.time
echo "gpu_tests rc=$?" >> $O/rc.txt
tail -3 $D/gpu_tests.log >> $O/rc.txt
grep -E 'Elapsed' $D/gpu_tests.time >> $O/rc.txt
L="--suite llama1b --contexts 4096 --batches 1 --modes graph_default --out_dir $D"
run() { local name=$1; shift; timeout 100 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run l1 $L --variants gqa8,tucker_32_128_128
run l2 $L --variants tucker_32_128_128,gqa8
for n in l1 l2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,4,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

#!/usr/bin/env bash
# Session 53 call 2 (tree in tree.txt): Tucker's default decode form chosen per batch (merged above decode_linear's
# 4 rows where the merged matrices are no larger than MHA's) and the split kernel's PDL only at 1-4 rows, against
# .carry/base (the tree before, 9f31b9d): LLaMA-1B graph_default at batches 1, 8, 32 (4k cached), alternating
# new / base / new; then the CUDA tests of test_decode.py and test_bench.py.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c2; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
A="--suite llama1b --variants gqa8,tucker_32_128_128,tucker_32_128_64,tucker_32_64_64 --modes graph_default --contexts 4096 --out_dir $D"
run() { local name=$1; shift; timeout 120 python3 -m scripts.bench_decode $A --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
runb() { local name=$1; shift; (cd .carry/base && timeout 120 python3 -m scripts.bench_decode $A --name $name "$@") > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run new1 --batches 8,32
runb base1 --batches 8,32
run new2 --batches 8,32
run new_b1 --batches 1
runb base_b1 --batches 1
for n in new1 base1 new2 new_b1 base_b1; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2-6,9,11 >> $O/rc.txt; done
timeout 200 python3 -m pytest -q --gpu_only tests/test_decode.py tests/test_bench.py -p no:cacheprovider > $D/tests.log 2>&1
echo "tests rc=$?" >> $O/rc.txt; tail -3 $D/tests.log >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $D

#!/usr/bin/env bash
# Session 52 call 5 (tree in tree.txt): every CUDA test of the repository on the session's final code
# (scripts.gpu_tests: pytest --gpu_only's selection in parallel jobs), after decode_linear.MIN_BLOCK_N 1 and pdl_split.
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c5; F=$O/files; mkdir -p $F
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $F/gpu.txt 2>&1
/usr/bin/time -v python3 -m scripts.gpu_tests --out_dir $F/gpu_tests --timeout 420 > $F/gpu_tests.log 2> $F/gpu_tests.time
echo "gpu_tests rc=$?" > $O/rc.txt
tail -5 $F/gpu_tests.log >> $O/rc.txt
grep -E 'Elapsed|Maximum resident' $F/gpu_tests.time >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $F

#!/usr/bin/env bash
# Session 51 call 1: scripts/gpu_tests.py's first run on a GPU: every CUDA test of the repository
# (pytest --gpu_only's selection), planned and run in parallel pytest processes by the script itself.
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c1; F=$O/files; mkdir -p $F
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $F/gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $F/gpu.txt 2>&1
nproc >> $F/gpu.txt
python3 -m scripts.gpu_tests --dry_run > $F/plan.txt 2>&1
/usr/bin/time -v python3 -m scripts.gpu_tests --out_dir $F/gpu_tests --timeout 480 > $F/gpu_tests.log 2> $F/gpu_tests.time
echo "gpu_tests rc=$?" > $O/rc.txt
tail -5 $F/gpu_tests.log >> $O/rc.txt
grep -E 'Elapsed|Maximum resident' $F/gpu_tests.time >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $F

#!/usr/bin/env bash
# Session 50 call 1: every CUDA test of the repository on today's tree (the 260 tests a CPU run skips for want of a
# GPU, node ids in s50_cuda_nodes.txt, plus tests/test_sample.py whole), in nine processes at once on one H200.
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c1; F=$O/files; mkdir -p $F
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $F/gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $F/gpu.txt 2>&1
N=.carry/calls/s50_cuda_nodes.txt
P="timeout 530 python3 -m pytest -v -rs -p no:cacheprovider --durations=10"
sel() { grep -E "$1" $N; }
wide() { grep -E "test_decode_(mega|wide)" $N | awk -v k=$1 'NR % 4 == k'; }
$P $(sel test_master_adamw) > $F/g1_master.log 2>&1 & p1=$!
$P $(sel "test_graph_step|test_fused_gelu|test_fused_loss") > $F/g2_graph_gelu_loss.log 2>&1 & p2=$!
$P $(sel "test_fused_mla_rope|test_fused_norm") > $F/g3_mla_norm.log 2>&1 & p3=$!
$P $(sel "test_fused_sample|test_bench_sample") tests/test_sample.py > $F/g4_sample.log 2>&1 & p4=$!
$P $(sel "test_decode\.py|test_decode_attention|test_decode_linear") > $F/g5_decode.log 2>&1 & p5=$!
$P $(wide 0) > $F/g6_wide0.log 2>&1 & p6=$!
$P $(wide 1) > $F/g7_wide1.log 2>&1 & p7=$!
$P $(wide 2) > $F/g8_wide2.log 2>&1 & p8=$!
$P $(wide 3) > $F/g9_wide3.log 2>&1 & p9=$!
rc=""
for i in 1 2 3 4 5 6 7 8 9; do eval "wait \$p$i"; rc="$rc g$i=$?"; done
echo "$rc" > $O/rc.txt
for f in $F/g*.log; do echo "$(basename $f): $(tail -1 $f)"; done >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $F

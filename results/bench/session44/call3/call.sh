#!/usr/bin/env bash
# session 44 call 3: the CUDA cases of the test files the kernel audit extended, on the GPU (two groups side by side)
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
C=$OUT/c3; mkdir -p $C
P="timeout 540 python3 -m pytest -q -rs -p no:cacheprovider --durations=10"
$P tests/test_decode_attention.py tests/test_decode_linear.py -k cuda > $C/group_b.log 2>&1 & B=$!
$P tests/test_graph_step.py tests/test_fused_loss.py tests/test_fused_norm.py tests/test_fused_gelu.py tests/test_fused_mla_rope.py \
  tests/test_fused_sample.py tests/test_master_adamw.py tests/test_kernels_compile.py -k "cuda or gpu" > $C/group_c.log 2>&1
Cr=$?
wait $B; B=$?
echo "b=$B c=$Cr" > $C/rc.txt
for f in $C/group_*.log; do echo "$f: $(tail -1 $f)"; done >> $C/rc.txt

#!/usr/bin/env bash
# Session 43 call 1: every CUDA test of the repository on today's tree, in three groups at once (one H200).
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $O/gpu.txt 2>&1
git log -1 --format=%H > $O/device_head.txt 2>&1
P="python3 -m pytest -v -rs -p no:cacheprovider --durations=15"
$P tests/test_decode_mega.py tests/test_decode_wide.py -k cuda > $O/group_a.log 2>&1 & A=$!
$P tests/test_decode.py tests/test_decode_attention.py tests/test_decode_linear.py -k cuda > $O/group_b.log 2>&1 & B=$!
$P tests/test_graph_step.py tests/test_train.py tests/test_fused_loss.py tests/test_fused_norm.py tests/test_fused_gelu.py \
   tests/test_fused_mla_rope.py tests/test_fused_sample.py tests/test_master_adamw.py tests/test_model.py \
   tests/test_chunked_loss.py tests/test_gpu_clock.py tests/test_gpu_smoke.py tests/test_convert.py tests/test_eval.py \
   tests/test_bench_decode_kernel.py tests/test_kernels_compile.py -k "cuda or gpu" > $O/group_c.log 2>&1
C=$?
$P tests/test_sample.py > $O/group_d.log 2>&1; D=$?
wait $A; A=$?; wait $B; B=$?
echo "a=$A b=$B c=$C d=$D" > $O/rc.txt
for f in $O/group_*.log; do echo "$f: $(tail -1 $f)"; done >> $O/rc.txt

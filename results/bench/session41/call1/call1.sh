#!/bin/bash
# session 41 call 1: the CUDA-heavy test files, whole, on the H200 (every case: CUDA and CPU), skip reasons listed.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $D/gpu.txt 2>&1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
start=$(date +%s)
timeout 540 python3 -m pytest -q -rs -p no:cacheprovider --durations=25 \
    tests/test_decode.py tests/test_decode_attention.py tests/test_decode_linear.py tests/test_decode_mega.py \
    tests/test_decode_wide.py tests/test_fused_gelu.py tests/test_fused_loss.py tests/test_fused_mla_rope.py \
    tests/test_fused_norm.py tests/test_fused_sample.py tests/test_graph_step.py tests/test_master_adamw.py \
    > $D/tests.txt 2>&1
echo "tests rc $? in $(( $(date +%s) - start )) s" >> $D/rc.txt
tail -3 $D/tests.txt >> $D/rc.txt
(cd $OUT && tar czf c1.tgz c1)

#!/bin/bash
# session 41 call 2: the rest of call 1's files on the H200 (call 1 stopped at its limit in test_decode_wide's CUDA cases):
# test_decode_wide.py's CUDA cases, the fused kernels' files, master AdamW, the graphed step; each test's id and result.
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
start=$(date +%s)
timeout 550 python3 -m pytest -v -rs -p no:cacheprovider --durations=25 \
    "tests/test_decode_wide.py" -k "cuda or test_fused or test_master or test_graph" \
    tests/test_fused_gelu.py tests/test_fused_loss.py tests/test_fused_mla_rope.py \
    tests/test_fused_norm.py tests/test_fused_sample.py tests/test_master_adamw.py tests/test_graph_step.py \
    > $D/tests.txt 2>&1
echo "tests rc $? in $(( $(date +%s) - start )) s" >> $D/rc.txt
tail -3 $D/tests.txt >> $D/rc.txt
(cd $OUT && tar czf c2.tgz c2)

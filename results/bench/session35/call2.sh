#!/bin/bash
# session 35 call 2 (8969a68): the CUDA tests of every file whose code changed since session 31's full CUDA run
# (model.py's sampling, act_ckpt and decode glue, train.py, sample.py, checkpoint.py): test_train, test_graph_step,
# test_decode, test_fused_mla_rope, the loss / norm / GELU kernels' CUDA tests, and test_sample.py whole (the GPT-2
# ranks carried this time).
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 330 python3 -m pytest -v -rs --durations=15 tests/test_graph_step.py tests/test_train.py tests/test_fused_loss.py \
  tests/test_fused_norm.py tests/test_fused_gelu.py tests/test_decode.py tests/test_fused_mla_rope.py -k cuda \
  > $D/tests_cuda.txt 2>&1
timeout 150 python3 -m pytest -v -rs --durations=10 tests/test_sample.py > $D/test_sample.txt 2>&1
(cd $OUT && tar czf c2.tgz c2)

#!/bin/bash
# session 36 call 4: the CUDA tests of the files whose code changed after session 35's GPU runs of them (model.py's
# validation, loss, generate and activation-checkpointing mends of 020d244: test_decode; the kernels' neighbours).
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 200 python3 -m pytest -q -rs tests/test_decode.py -k cuda > $D/test_decode_cuda.txt 2>&1; echo "test_decode rc $?" >> $D/rc.txt
timeout 280 python3 -m pytest -q -rs tests/test_fused_norm.py tests/test_fused_gelu.py tests/test_fused_mla_rope.py \
  tests/test_bench.py tests/test_model.py -k cuda > $D/tests_cuda.txt 2>&1; echo "tests_cuda rc $?" >> $D/rc.txt
(cd $OUT && tar czf c4.tgz c4)

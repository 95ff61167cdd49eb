#!/bin/bash
# session 35 call 6 (815dcb6+: MasterAdamW with a beta of 0 and fresh moments on load; GraphedTrainStep's batch shape
# check; checkpoint's temp names and errors): the CUDA tests of test_master_adamw and test_graph_step, and
# test_checkpoint whole.
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 240 python3 -m pytest -v -rs --durations=5 tests/test_master_adamw.py tests/test_graph_step.py -k cuda \
  > $D/tests_cuda.txt 2>&1
timeout 60 python3 -m pytest -v -rs tests/test_checkpoint.py > $D/test_checkpoint.txt 2>&1
(cd $OUT && tar czf c6.tgz c6)

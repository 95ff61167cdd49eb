#!/bin/bash
# session 39 call 5: call 4's CUDA tests ran past their 200 s: the ones of this session's mechanism, verbose:
# the kept decoder after CUDA's fused AdamW (graph, one launch), the CPU-side counting tests, and the graphed
# training iterations (each replay counted as an untracked write).
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 120 python3 -m pytest -v -rs -p no:cacheprovider tests/test_decode.py -k "fused_adamw_step or version_bump or fused_step" \
  > $D/tests_decode.txt 2>&1
echo "tests_decode rc $?" >> $D/rc.txt
timeout 330 python3 -m pytest -v -rs -p no:cacheprovider --durations=10 tests/test_graph_step.py -k "cuda_graphed_iterations" \
  > $D/tests_graph_step.txt 2>&1
echo "tests_graph_step rc $?" >> $D/rc.txt
(cd $OUT && tar czf c5.tgz c5)

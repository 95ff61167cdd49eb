#!/bin/bash
# session 41 call 3: the CUDA user paths (scripts/gpu_smoke.sh) on the tree with session 40's train.py changes and
# session 41's sample.py check, then what calls 1-2 did not reach (fused_sample's rest, master AdamW, the graphed step)
# with the time left.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
start=$(date +%s)
OUT=$D bash scripts/gpu_smoke.sh > $D/smoke.txt 2>&1
echo "smoke rc $? in $(( $(date +%s) - start )) s" >> $D/rc.txt
left=$(( 545 - ($(date +%s) - start) ))
if [ $left -gt 30 ]; then
  timeout $left python3 -m pytest -v -rs -p no:cacheprovider --durations=15 \
      tests/test_fused_sample.py::test_cuda_draws_follow_the_top_k_softmax \
      tests/test_master_adamw.py tests/test_graph_step.py > $D/tests.txt 2>&1
  echo "tests rc $? in $(( $(date +%s) - start )) s (limit $left s)" >> $D/rc.txt
  tail -3 $D/tests.txt >> $D/rc.txt
fi
(cd $OUT && tar czf c3.tgz c3)

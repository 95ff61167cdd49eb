#!/bin/bash
# session 42 call 1: the two CUDA tests that compared greedy tokens only, now comparing each step's logits
# (record_step_logits): the graph replay against the eager step, and the kept decoder after a fused AdamW step
# against a fresh model's; then test_decode.py's other CUDA cases with the time left.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $D/gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $D/gpu.txt 2>&1
start=$(date +%s)
python3 -m pytest -v -rs -p no:cacheprovider --durations=10 tests/test_decode.py \
    -k "cuda_graph_replays_the_eager_step or fused_adamw_step_is_a_fresh_models" > $D/tests_two.txt 2>&1
echo "two rc $? in $(( $(date +%s) - start )) s" >> $D/rc.txt
tail -3 $D/tests_two.txt >> $D/rc.txt
left=$(( 400 - ($(date +%s) - start) ))
if [ $left -gt 30 ]; then
  timeout $left python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode.py -k "cuda and not cuda_graph_replays_the_eager_step and not fused_adamw_step_is_a_fresh_models" > $D/tests_rest.txt 2>&1
  echo "rest rc $? in $(( $(date +%s) - start )) s (limit $left s)" >> $D/rc.txt
  tail -3 $D/tests_rest.txt >> $D/rc.txt
fi

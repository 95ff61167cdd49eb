#!/bin/bash
# session 35 call 5 (the review mends in train.py, model.py's loss / checkpointing / generate, sample.py): the CUDA
# tests of test_graph_step (train.py with graph_step, resume), test_train, test_fused_loss (the compiled heads, the
# logits loss), test_decode's graph tests; the README's main job on the GPU.
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 280 python3 -m pytest -v -rs --durations=5 tests/test_graph_step.py tests/test_train.py tests/test_fused_loss.py \
  -k cuda > $D/tests_cuda.txt 2>&1
/usr/bin/time -v bash -c "python3 -m data.shakespeare.prepare && python3 train.py config/quickstart_tucker.py && python3 sample.py --out_dir=out-quickstart-tucker --num_samples=2 --max_new_tokens=100" > $D/main_job.txt 2>&1
rm -rf out-quickstart-tucker
(cd $OUT && tar czf c5.tgz c5)

#!/bin/bash
# session 36 call 1 (67909fd: session 35's last read, 7147838, not yet run on a GPU): fused_sample's entry points
# sharing one host-side check of the ids (_blocks); train.py making cuda:N current in every CUDA run.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $D/gpu.txt 2>&1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 150 python3 -m pytest -v -rs --durations=5 tests/test_fused_sample.py > $D/test_fused_sample.txt 2>&1
timeout 300 python3 -m pytest -v -rs --durations=5 tests/test_train.py tests/test_graph_step.py -k cuda \
  > $D/tests_train_cuda.txt 2>&1
(cd $OUT && tar czf c1.tgz c1)

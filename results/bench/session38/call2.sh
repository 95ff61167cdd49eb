#!/bin/bash
# session 38 call 2: the lazy op registration and model.not_traced (2710793) under train.py and sample.py on CUDA:
# scripts/gpu_smoke.sh (compiled training, graph_step, sampling in every mode),
# then the CUDA tests of the files changed.
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
OUT=$D timeout 380 bash scripts/gpu_smoke.sh > $D/smoke_log.txt 2>&1; echo "gpu_smoke rc $?" >> $D/rc.txt
rm -rf $D/smoke/data $D/smoke/*/ckpt*.pt
timeout 150 python3 -m pytest -v -rs -p no:cacheprovider tests/test_train.py tests/test_graph_step.py tests/test_checkpoint.py \
  tests/test_sample.py tests/test_readme.py -k "cuda or readme" > $D/tests_cuda.txt 2>&1
echo "tests_cuda rc $?" >> $D/rc.txt
(cd $OUT && tar czf c2.tgz c2)

#!/bin/bash
# session 40 call 5: the tests of the files this session changed, on the H200 (their CUDA cases and the rest).
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 420 python3 -m pytest -q -rs -p no:cacheprovider tests/test_model.py tests/test_checkpoint.py tests/test_train.py \
    -k "sinusoidal or cuda or resume or fresh_runs or more_processes or invalid_training or unreadable" \
    > $D/tests.txt 2>&1
echo "tests rc $?" >> $D/rc.txt
tail -3 $D/tests.txt >> $D/rc.txt
(cd $OUT && tar czf c5.tgz c5)

#!/bin/bash
# session 37 call 4: tests/test_readme.py on CUDA (the README's main job at the default device), which call 3's
# 150-s test budget cut.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 240 python3 -m pytest -v -rs -p no:cacheprovider --durations=5 tests/test_readme.py > $D/test_readme.txt 2>&1
echo "test_readme rc $?" >> $D/rc.txt
(cd $OUT && tar czf c4.tgz c4)

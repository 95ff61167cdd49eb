#!/usr/bin/env bash
# session 44 call 4: the decode_mega / decode_wide audit's new tests on the GPU, and the two files' CUDA cases
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
C=$OUT/c4; mkdir -p $C
timeout 400 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_mega.py tests/test_decode_wide.py \
  -k "refusal or refused or reserves or refuses or settings_the_kernel" > $C/new_tests.log 2>&1
echo "new tests rc=$?" > $C/rc.txt; tail -1 $C/new_tests.log >> $C/rc.txt

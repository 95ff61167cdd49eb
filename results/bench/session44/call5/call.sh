#!/usr/bin/env bash
# session 44 call 5: decode_mega's cache check changed: its CUDA tests and sample.py --decode=mega on the GPU
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
C=$OUT/c5; mkdir -p $C
timeout 480 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_mega.py -k "cuda and not sass" > $C/decode_mega_cuda.log 2>&1
echo "decode_mega cuda rc=$?" > $C/rc.txt; tail -1 $C/decode_mega_cuda.log >> $C/rc.txt

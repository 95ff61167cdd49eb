#!/usr/bin/env bash
# Session 48 call 3: the CUDA tests the review changed (8fe9859): decode_wide at one program an SM and the timed
# step's programs an SM, fused_mla_rope's CUDA tests, decode_mega's explicit programs= refusal; shared_memory on a
# bare 'cuda'.
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c3; mkdir -p $O
P="python3 -m pytest -q -rs -p no:cacheprovider --durations=5"
$P tests/test_decode_wide.py -k "one_program_an_sm or timed_step" > $O/wide.log 2>&1 & W=$!
$P tests/test_decode_mega.py -k "cuda and refused" > $O/mega.log 2>&1 & M=$!
$P tests/test_fused_mla_rope.py -k cuda > $O/mla_rope.log 2>&1; echo "mla_rope=$?" > $O/rc.txt
python3 -c "import torch, decode_attention as da; print(da.shared_memory(torch.device('cuda')), da.shared_memory(torch.device('cuda', 0)))" > $O/shared.log 2>&1
wait $W; echo "wide=$?" >> $O/rc.txt; wait $M; echo "mega=$?" >> $O/rc.txt
for f in $O/*.log; do echo "$f: $(tail -1 $f)"; done >> $O/rc.txt

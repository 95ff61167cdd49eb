#!/usr/bin/env bash
# Session 48 call 4: on the session's last code (cab5cb4), decode_wide's one-launch CUDA tests not yet run this
# session (every variant at the default two programs an SM, through the new _check_fits), and test_sample.py whole
# (sample.py's new one-line refusal for --decode=mega).
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c4; mkdir -p $O
P="python3 -m pytest -q -rs -p no:cacheprovider --durations=5"
W="tests/test_decode_wide.py::test_cuda_wide_one_launch_matches_the_phases_and_the_model"
$P "$W[tucker-32]" "$W[tucker_shared-32]" "$W[mha-8]" "$W[gqa-8]" "$W[mqa-32]" "$W[tucker-8]" > $O/wide1.log 2>&1 & W1=$!
$P "$W[mla_shared-32]" "$W[mla-8]" "$W[tucker_rope-32]" "$W[mha_rope-8]" "$W[tucker_shared_rope-32]" "$W[mla_latent-8]" \
   > $O/wide2.log 2>&1 & W2=$!
$P tests/test_sample.py > $O/sample.log 2>&1; echo "sample=$?" > $O/rc.txt
wait $W1; echo "wide1=$?" >> $O/rc.txt; wait $W2; echo "wide2=$?" >> $O/rc.txt
for f in $O/*.log; do echo "$f: $(tail -1 $f)"; done >> $O/rc.txt

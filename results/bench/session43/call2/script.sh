#!/usr/bin/env bash
# Session 43 call 2: the CUDA tests call 1 did not reach (its 570-s limit): decode_wide's last one-launch cases and
# timed step (three processes), and test_sample.py whole.
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c2; mkdir -p $O
P="python3 -m pytest -v -rs -p no:cacheprovider --durations=15"
W=.carry/calls/s43c2_wide.txt
$P $(sed -n 1,3p $W) > $O/group_a1.log 2>&1 & A1=$!
$P $(sed -n 4,5p $W) > $O/group_a2.log 2>&1 & A2=$!
$P $(sed -n 6,7p $W) > $O/group_a3.log 2>&1 & A3=$!
$P tests/test_sample.py > $O/group_d.log 2>&1; D=$?
wait $A1; A1=$?; wait $A2; A2=$?; wait $A3; A3=$?
echo "a1=$A1 a2=$A2 a3=$A3 d=$D" > $O/rc.txt
for f in $O/group_*.log; do echo "$f: $(tail -1 $f)"; done >> $O/rc.txt

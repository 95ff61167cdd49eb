#!/bin/bash
# session 37 call 6: the sampling changes on CUDA (fused_sample.argmax's finite flag, greedy's non-finite check, the
# vanishing temperature): the fused_sample CUDA tests, test_decode's sampling / generate cases, test_sample's CUDA
# cases; then sample.py greedy on CUDA (graph) against eager (cmp) with its rate, as session 36 call 2.
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 240 python3 -m pytest -q -rs -p no:cacheprovider tests/test_fused_sample.py tests/test_sample.py \
  tests/test_decode.py -k "cuda and (sample or argmax or generat or greedy or graph_sampling or finite or device)" \
  > $D/tests.txt 2>&1
echo "tests rc $?" >> $D/rc.txt
timeout 120 python3 -m data.shakespeare.prepare --out_dir $D/data > $D/prep.txt 2>&1; echo "prepare rc $?" >> $D/rc.txt
timeout 150 python3 train.py config/quickstart_tucker.py --data_dir=$D/data --out_dir=$D/ck --max_iters=60 \
  --eval_interval=60 > $D/train.txt 2>&1; echo "train rc $?" >> $D/rc.txt
for m in auto eager; do
  timeout 120 python3 sample.py --out_dir=$D/ck --temperature=0 --num_samples=2 --max_new_tokens=300 --decode=$m \
    > $D/greedy_$m.out 2> $D/greedy_$m.err; echo "greedy_$m rc $?" >> $D/rc.txt
done
cmp $D/greedy_auto.out $D/greedy_eager.out; echo "cmp rc $?" >> $D/rc.txt
rm -rf $D/data $D/ck/*.pt
(cd $OUT && tar czf c6.tgz c6)

#!/bin/bash
# session 36 call 2 (configurator.make_current: train.py and sample.py at a bare 'cuda'): the failing test of call 1
# and its neighbours, test_sample (new: sample.py at '', 'cuda', 'cuda:0'), the README's main job with its exit
# status checked, sample.py greedy at a bare 'cuda' against --decode=eager.
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 200 python3 -m pytest -v -rs --durations=5 tests/test_train.py tests/test_graph_step.py -k cuda \
  > $D/tests_train_cuda.txt 2>&1; echo "tests_train_cuda rc $?" >> $D/rc.txt
timeout 150 python3 -m pytest -v -rs --durations=5 tests/test_sample.py tests/test_configurator.py \
  > $D/test_sample.txt 2>&1; echo "test_sample rc $?" >> $D/rc.txt
rm -rf out-quickstart-tucker
/usr/bin/time -v bash -c "python3 -m data.shakespeare.prepare && python3 train.py config/quickstart_tucker.py && python3 sample.py --out_dir=out-quickstart-tucker --num_samples=2 --max_new_tokens=100" > $D/main_job.txt 2>&1
echo "main_job rc $?" >> $D/rc.txt
python3 sample.py --out_dir=out-quickstart-tucker --device=cuda --temperature=0 --num_samples=2 --max_new_tokens=300 \
  > $D/greedy_graph.txt 2> $D/greedy_graph.err; echo "greedy_graph rc $?" >> $D/rc.txt
python3 sample.py --out_dir=out-quickstart-tucker --device=cuda --temperature=0 --num_samples=2 --max_new_tokens=300 \
  --decode=eager > $D/greedy_eager.txt 2> $D/greedy_eager.err; echo "greedy_eager rc $?" >> $D/rc.txt
cmp $D/greedy_graph.txt $D/greedy_eager.txt >> $D/rc.txt 2>&1; echo "cmp rc $?" >> $D/rc.txt
(cd $OUT && tar czf c2.tgz c2)

#!/bin/bash
# session 35 call 4 (100980e): generate and StaticDecoder's capture now run under torch.cuda.device(the tensors'
# device), sample.py sets cuda:N current: every CUDA test of test_decode.py; sample.py on an explicit --device=cuda:0,
# greedy graph against eager text, and sampled at its defaults.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 240 python3 -m pytest -v -rs --durations=5 tests/test_decode.py -k cuda > $D/test_decode_cuda.txt 2>&1
python3 -m data.shakespeare.prepare > /dev/null 2>&1
timeout 60 python3 train.py config/shakespeare_tucker.py --max_iters=1 --eval_interval=1 --always_save_checkpoint=True \
  --block_size=1024 --batch_size=4 --eval_full_val=False --eval_iters=1 --out_dir=out-ck-tucker > $D/ck_tucker.txt 2>&1
for m in auto eager; do
  timeout 40 python3 sample.py --out_dir=out-ck-tucker --device=cuda:0 --num_samples=2 --max_new_tokens=300 --temperature=0 \
    --decode=$m > $D/sample_t0_$m.out 2> $D/sample_t0_$m.err
done
cmp $D/sample_t0_auto.out $D/sample_t0_eager.out > $D/sample_t0_cmp.txt 2>&1; echo "cmp rc $?" >> $D/sample_t0_cmp.txt
timeout 40 python3 sample.py --out_dir=out-ck-tucker --device=cuda:0 --num_samples=3 --max_new_tokens=500 > $D/sample.out 2> $D/sample.err
rm -rf out-ck-*
(cd $OUT && tar czf c4.tgz c4)

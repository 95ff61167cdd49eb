#!/usr/bin/env bash
# Session 48 call 6 (tree after k_up_launch's measured rule): fused_mla_rope's CUDA tests (the kernel at 3 and 2
# stages, the matmul for float32 on a 100 KB GPU and for wide latents), train.py with a 512-wide latent (now by the
# matmul) compiled, and bench_k_up once more at 128 / 256 as the ladder now picks.
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c6; mkdir -p $O
python3 -m pytest -q -rs -p no:cacheprovider --durations=5 tests/test_fused_mla_rope.py -k cuda > $O/mla_rope.log 2>&1 &
R=$!
python3 -m data.shakespeare.prepare --input $TUCKER_SHAKESPEARE_TXT --tokenizer $TUCKER_GPT2_TIKTOKEN --out_dir /tmp/shk > $O/prep.log 2>&1
python3 train.py config/shakespeare_mla_shared128.py --data_dir=/tmp/shk --out_dir=/tmp/mla512 --kv_rank=512 \
    --q_rank=512 --pos_emb=rope --mla_rope=decoupled --max_iters=30 --eval_interval=30 --eval_iters=2 \
    --eval_full_val=False --batch_size=16 --compile=True > $O/train_mla512.log 2>&1
echo "train_mla512=$?" > $O/rc.txt
wait $R; echo "mla_rope=$?" >> $O/rc.txt
for f in $O/*.log; do echo "$f: $(tail -1 $f)"; done >> $O/rc.txt

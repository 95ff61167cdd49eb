#!/usr/bin/env bash
# Session 56 call 2 (session 51 call 2 again, on 4690af0+docs; no model or kernel code changed since db14463):
# LLaMA-3 1B decode at batch 1, 4,096 cached tokens (every llama1b row, the default step),
# sample.py's tokens/s for the six GPT-2 124M variants at its defaults and greedy, the greedy text against the eager
# path's.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c2; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $D/gpu.txt 2>&1
timeout 200 python3 -m scripts.bench_decode --suite llama1b --modes graph_default --batches 1 --contexts 4096 \
  --out_dir $D --name decode_llama1b > $D/decode_llama1b.log 2>&1; echo "llama rc=$?" > $O/rc.txt
python3 -m data.shakespeare.prepare > /dev/null 2>&1
declare -A CFG=([mha]=shakespeare_mha [gqa4]=shakespeare_gqa4 [mqa]=shakespeare_gqa1 [mla_shared128]=shakespeare_mla_shared128 \
  [tucker_8_64_64]=shakespeare_tucker_8_64_64 [tucker_shared_8_64_64]=shakespeare_tucker_shared_8_64_64)
V="mha gqa4 mqa mla_shared128 tucker_8_64_64 tucker_shared_8_64_64"
for v in $V; do
  timeout 60 python3 train.py config/${CFG[$v]}.py --max_iters=1 --eval_interval=1 --always_save_checkpoint=True \
    --block_size=1024 --batch_size=4 --eval_full_val=False --eval_iters=1 --out_dir=out-ck-$v > $D/ck_$v.txt 2>&1
done
S="--num_samples=3 --max_new_tokens=500"
for v in $V; do
  timeout 40 python3 sample.py --out_dir=out-ck-$v $S > $D/sampled_$v.out 2> $D/sampled_$v.err
  timeout 40 python3 sample.py --out_dir=out-ck-$v $S --temperature=0 > $D/greedy_$v.out 2> $D/greedy_$v.err
  timeout 60 python3 sample.py --out_dir=out-ck-$v $S --temperature=0 --decode=eager > $D/greedy_eager_$v.out 2> $D/greedy_eager_$v.err
  cmp $D/greedy_$v.out $D/greedy_eager_$v.out >> $D/greedy_cmp.txt 2>&1; echo "$v cmp rc $?" >> $D/greedy_cmp.txt
done
rm -rf out-ck-*
echo "sample done" >> $O/rc.txt
grep -H "tokens/s" $D/sampled_*.err $D/greedy_[mgt]*.err | head -40 >> $O/rc.txt
cat $D/greedy_cmp.txt >> $O/rc.txt
grep -E "^\| " $D/decode_llama1b.md | cut -d"|" -f2-8 >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $D

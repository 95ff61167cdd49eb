#!/usr/bin/env bash
# Session 50 call 3: the user-facing CUDA paths on today's tree (scripts/gpu_smoke.sh), and our MHA step against
# nanoGPT's model in alternating rounds at 12x1024 (scripts/loop_gap, session 30 call 4's command), one after the
# other (the smoke's compiles would disturb the rounds' timing).
set -u
export PYTHONUNBUFFERED=1 TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c3; F=$O/files; mkdir -p $F
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $F/gpu.txt 2>&1
timeout 420 python3 -m scripts.loop_gap --variant mha --shape 12x1024 --graph_step --master_weights --rounds 5 \
    --iters 4 --nanogpt .carry/nanogpt --out_dir $F --name loop_gap_12x1024 > $F/loop_gap_12x1024.log 2>&1
echo "loop_gap=$?" > $O/rc.txt
OUT=$F timeout 420 bash scripts/gpu_smoke.sh > $F/smoke.log 2>&1
echo "smoke=$?" >> $O/rc.txt
cat $F/smoke/rc.txt >> $O/rc.txt
rm -rf $F/smoke/data $F/smoke/*/ckpt*.pt
tar -C $O -czf $O/files.tgz files && rm -rf $F

#!/usr/bin/env bash
# Session 50 call 4: today's tree, the rest of issue 14's measured targets: our MHA step against nanoGPT's model in
# alternating rounds at 64x256 (session 30 call 4's command), then LLaMA-3 1B's GQA-8, Tucker [32,64,64] and MHA rows
# with per-layer activation checkpointing (session 32 call 1's command).
set -u
export PYTHONUNBUFFERED=1 TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c4; F=$O/files; mkdir -p $F
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $F/gpu.txt 2>&1
timeout 200 python3 -m scripts.loop_gap --variant mha --shape 64x256 --graph_step --master_weights --rounds 5 \
    --iters 4 --nanogpt .carry/nanogpt --out_dir $F --name loop_gap_64x256 > $F/loop_gap_64x256.log 2>&1
echo "loop_gap=$?" > $O/rc.txt
timeout 330 python3 -m scripts.bench_train --suite llama1b --master_weights --act_ckpt --variants gqa8,tucker_32_64_64,mha \
    --precompile 3 --time_budget 315 --out_dir $F --name train_llama1b_act_ckpt > $F/llama.log 2>&1
echo "llama=$?" >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $F

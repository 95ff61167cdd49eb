#!/usr/bin/env bash
# Session 50 call 5: today's tree, MLA shared 128 against MHA (learned positions and decoupled RoPE, both shapes):
# the rows call 2's time budget skipped (issue 14's "no variant slower than MHA", MLA's RoPE cost and MFU).
set -u
export PYTHONUNBUFFERED=1 TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c5; F=$O/files; mkdir -p $F
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $F/gpu.txt 2>&1
timeout 345 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024,64x256 --rope both \
    --variants mha,mla_shared128 --precompile 4 --time_budget 330 --out_dir $F --name train_mla > $F/train.log 2>&1
echo "train=$?" > $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $F

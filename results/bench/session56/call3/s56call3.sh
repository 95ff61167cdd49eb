#!/usr/bin/env bash
# Session 56 call 3 (tree in tree.txt; no training code changed since session 50's 076266f): the training step's
# targets on today's tree, session 50 call 2's command for MHA, Tucker [8,64,64] and MLA shared 128 (learned and
# RoPE, 12x1024 and 64x256, nanoGPT's bench.py before and after our rows).
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c3; F=$O/files; mkdir -p $F
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $F/gpu.txt 2>&1
timeout 500 python3 -m scripts.bench_train --nanogpt .carry/nanogpt --graph_step --master_weights \
    --shapes 12x1024,64x256 --rope both --variants mha,tucker_8_64_64,mla_shared128 \
    --precompile 6 --time_budget 470 --out_dir $F --name train_final > $F/train.log 2>&1
echo "train=$?" > $O/rc.txt
grep -E '^\| (MHA|Tucker|MLA)' $F/train_final.md | head -12 | cut -d'|' -f2-14 >> $O/rc.txt
tail -2 $F/train.log >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $F

#!/usr/bin/env bash
# Session 50 call 2: today's tree re-measured where the targets are measured: the training step (session 30 call 3's
# command, nanoGPT's bench.py in the same run) and the batch-32 / batch-1 decode step (session 27 call 4's modes).
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c2; F=$O/files; mkdir -p $F
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $F/gpu.txt 2>&1
timeout 390 python3 -m scripts.bench_train --nanogpt .carry/nanogpt --graph_step --master_weights \
    --shapes 12x1024,64x256 --rope both --variants mha,tucker_8_64_64,tucker_shared_8_64_64,mla_shared128 \
    --precompile 6 --time_budget 370 --out_dir $F --name train_final > $F/train.log 2>&1
echo "train=$?" > $O/rc.txt
timeout 150 python3 -m scripts.bench_decode --variants mha,mqa,tucker_8_64_64,tucker_shared_8_64_64 \
    --modes graph_merged,graph_mega --batches 1,32 --contexts 4096,16384 --out_dir $F --name decode_final > $F/decode.log 2>&1
echo "decode=$?" >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $F

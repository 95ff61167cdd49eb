#!/usr/bin/env bash
# Session 56 call 1 (tree in tree.txt): the decode step at a glance on today's tree (session 27 call 4's command:
# six variants, the default step and the one launch, batch 1 and 32, 1k-32k cached tokens), then the B=32/16k
# target case again (MHA, Tucker, Tucker shared, both modes) for a second figure of each ratio in the same call.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c1; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
git log -1 --format=%H > $D/commit.txt 2>/dev/null
SECONDS=0
timeout 420 python3 -m scripts.bench_decode --variants mha,gqa4,mqa,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64 \
    --modes graph_default,graph_mega --batches 1,32 --contexts 1024,4096,16384,32768 \
    --out_dir $D --name decode_final > $D/decode.log 2>&1
echo "glance rc=$? ${SECONDS}s" >> $O/rc.txt
timeout 120 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 \
    --modes graph_default,graph_mega --batches 32 --contexts 16384 --out_dir $D --name b32_repeat > $D/b32.log 2>&1
echo "b32 rc=$? ${SECONDS}s" >> $O/rc.txt
grep -E '^\| ' $D/decode_final.md | head -60 >> $O/rc.txt
grep -E '^\| ' $D/b32_repeat.md | head -20 >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $D

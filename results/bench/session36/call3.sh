#!/bin/bash
# session 36 call 3: scripts/gpu_smoke.sh (the CUDA-only user paths no CUDA test reaches: torchrun DDP / FSDP2 over
# NCCL, compile=True with and without graph_step, sample.py compiled and mega, CPU checkpoints resumed on CUDA,
# float16 training, eval_zeroshot), then tests/test_readme.py (the README's main job at the default device, cuda).
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
OUT=$D timeout 400 bash scripts/gpu_smoke.sh > $D/smoke_log.txt 2>&1; echo "gpu_smoke rc $?" >> $D/rc.txt
rm -rf $D/smoke/data $D/smoke/*/ckpt*.pt
timeout 100 python3 -m pytest -v -rs tests/test_readme.py > $D/test_readme.txt 2>&1; echo "test_readme rc $?" >> $D/rc.txt
(cd $OUT && tar czf c3.tgz c3)

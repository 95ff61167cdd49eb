#!/bin/bash
# session 32 call 6: call 5 again on the final script (its CUDA-graph timing now bench_decode_kernel.time_graph, one eager
# warm-up call before one on a side stream, where call 5 made three on the side stream)
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt
timeout 300 python3 -m scripts.bench_attention --dims 64/64,96/64,128/64 --iters 50 --repeats 7 --out_dir $D --name attention > $D/log.txt 2>&1
echo "rc $?" >> $D/log.txt
# the LLaMA-3 1B rows' attention (32 heads at N = 4096): 64/64 (MHA, GQA, Tucker [32,*,64] in their 64-wide latents),
# 128/128 (Tucker [32,128,128] and MLA dcK = 128 attend in a 128-wide key latent)
timeout 200 python3 -m scripts.bench_attention --shapes 2x4096 --heads 32 --dims 64/64,128/64,128/128 \
    --kernels sdpa_auto,flex --iters 20 --repeats 5 --out_dir $D --name attention_llama > $D/log_llama.txt 2>&1
echo "rc $?" >> $D/log_llama.txt
(cd $OUT && tar czf c6.tgz c6)

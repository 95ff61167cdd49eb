#!/usr/bin/env bash
# Session 51 call 4 (tree 3585a5b): LLaMA-1B's decode table at batch 1 / 4k, both decode forms of every row (graph:
# factored, now the default of its Tucker rows; graph_merged); GQA-8 and the Tucker rows at batch 32 / 4k in both
# forms (the default rule does not look at the batch); decode_attention's split knobs for the 32-head latent at batch 1
# (one KV head: 16 splits of 256 tokens = 16 programs); then every CUDA test (scripts/gpu_tests).
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c4; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
B="python3 -m scripts.bench_decode --suite llama1b --contexts 4096"
timeout 150 $B --modes graph,graph_merged --batches 1 --out_dir $D --name llama_b1 > $D/llama_b1.log 2>&1
echo "llama_b1 rc=$?" >> $O/rc.txt
timeout 100 $B --variants gqa8,tucker_32_128_128,tucker_32_128_64,tucker_32_64_64 --modes graph,graph_merged --batches 32 \
  --out_dir $D --name llama_b32 > $D/llama_b32.log 2>&1
echo "llama_b32 rc=$?" >> $O/rc.txt
K=(--variants gqa8,tucker_32_128_128,tucker_32_64_64 --modes graph --batches 1)
for knob in "" MIN_SPLIT_TOKENS=128 MIN_SPLIT_TOKENS=64 NUM_WARPS=8; do
  n=knob_${knob:-defaults}; n=${n//=/_}
  timeout 60 $B "${K[@]}" ${knob:+--knob $knob} --out_dir $D --name $n > $D/$n.log 2>&1
  echo "$n rc=$?" >> $O/rc.txt
done
timeout 280 python3 -m scripts.gpu_tests --out_dir $D/gpu_tests --timeout 260 > $D/gpu_tests.log 2>&1
echo "gpu_tests rc=$?" >> $O/rc.txt; tail -2 $D/gpu_tests.log >> $O/rc.txt
for f in $D/llama_b1.md $D/llama_b32.md $D/knob_*.md; do
  echo "== $(basename $f)" >> $O/rc.txt; grep -E '^\| [A-Z]' $f | grep -v '^| variant' | cut -d'|' -f2-6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

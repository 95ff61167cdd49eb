#!/usr/bin/env bash
# Session 51 call 5 (tree 'git log -1' in tree.txt): decode_attention's finer splits for wide groups (MIN_SPLIT_TOKENS_WIDE
# 128 where a KV head serves >= 16 query heads) against the same tree with the old minimum (--knob
# MIN_SPLIT_TOKENS_WIDE=256), LLaMA-1B at batch 1 / 4k, every row, both decode forms; then the CUDA tests of
# test_decode_attention.py and test_decode.py.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c5; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
B="python3 -m scripts.bench_decode --suite llama1b --contexts 4096 --modes graph,graph_merged --batches 1"
timeout 100 $B --out_dir $D --name llama_new > $D/llama_new.log 2>&1; echo "llama_new rc=$?" >> $O/rc.txt
timeout 100 $B --knob MIN_SPLIT_TOKENS_WIDE=256 --out_dir $D --name llama_old_splits > $D/llama_old_splits.log 2>&1
echo "llama_old_splits rc=$?" >> $O/rc.txt
timeout 100 $B --out_dir $D --name llama_new2 > $D/llama_new2.log 2>&1; echo "llama_new2 rc=$?" >> $O/rc.txt
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_attention.py tests/test_decode.py -k cuda \
  > $D/tests.txt 2>&1; echo "tests rc=$? $(tail -1 $D/tests.txt)" >> $O/rc.txt
for f in $D/llama_new.md $D/llama_old_splits.md $D/llama_new2.md; do
  echo "== $(basename $f)" >> $O/rc.txt; grep -E '^\| [A-Z]' $f | grep -v '^| variant' | cut -d'|' -f2-6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

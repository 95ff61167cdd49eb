#!/usr/bin/env bash
# Session 51 call 7 (tree in tree.txt): the new graph_default mode (each layer in its own default decode form, what
# sample.py runs): LLaMA-1B every row at batch 1 / 4k, then GPT-2's six variants at batch 1 and 32, 4k.
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c7; D=$O/files; mkdir -p $D
timeout 90 python3 -m scripts.bench_decode --suite llama1b --modes graph_default --batches 1 --contexts 4096 \
  --out_dir $D --name llama_default > $D/llama_default.log 2>&1; echo "llama rc=$?" >> $O/rc.txt
timeout 100 python3 -m scripts.bench_decode --variants mha,gqa4,mqa,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64 \
  --modes graph_default --batches 1,32 --contexts 4096 --out_dir $D --name gpt2_default > $D/gpt2_default.log 2>&1
echo "gpt2 rc=$?" >> $O/rc.txt
for f in $D/llama_default.md $D/gpt2_default.md; do
  echo "== $(basename $f)" >> $O/rc.txt; grep -E '^\| [A-Z]' $f | grep -v '^| variant' | cut -d'|' -f2-8 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

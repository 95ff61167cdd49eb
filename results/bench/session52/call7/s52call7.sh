#!/usr/bin/env bash
# Session 52 call 7 (tree in tree.txt; .carry/base = 9609077): the batch-1 changes at the other batches decode_linear
# serves (1, 2 and 4 rows), one-column blocks now only where a whole K row fits (LOOP_BLOCK_N 2 in the loops over K) against the tree
# before, new / base / new: LLaMA-1B GQA-8 and the Tucker rows, GPT-2 MHA and Tucker, 4k cached, default forms.
set -u
export PYTHONUNBUFFERED=1
O=$OUT/c7; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
L="--suite llama1b --variants gqa8,tucker_32_128_128,tucker_32_64_64 --modes graph_default --batches 1,2,4 --contexts 4096"
G="--variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_default --batches 1,2,4 --contexts 4096"
run() {  # name tree args
  local name=$1 tree=$2; shift 2
  if [ $tree = base ]; then C="cd .carry/base &&"; else C=""; fi
  timeout 100 bash -c "$C python3 -m scripts.bench_decode $* --out_dir $D --name $name" > $D/$name.log 2>&1
  echo "$name rc=$?" >> $O/rc.txt
}
run llama_new1 new $L
run llama_base base $L
run llama_new2 new $L
run gpt2_new new $G
run gpt2_base base $G
for n in llama_new1 llama_base llama_new2 gpt2_new gpt2_base; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,4,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

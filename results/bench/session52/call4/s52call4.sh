#!/usr/bin/env bash
# Session 52 call 4 (tree in tree.txt; .carry/base = 9609077, the tree before it): one-column GEMV blocks
# (decode_linear.MIN_BLOCK_N 1) and the split kernel overlapping G_q's GEMV in Tucker's factored step (pdl_split)
# against the tree before, alternating new / base, LLaMA-1B batch 1 / 4k every row, default forms; GPT-2's six
# variants at batch 1 / 4k; then the CUDA tests of the three decode test files on the new tree.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c4; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
L="--suite llama1b --modes graph_default --batches 1 --contexts 4096"
G="--variants mha,gqa4,mqa,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_default --batches 1 --contexts 4096"
run() {  # name tree args
  local name=$1 tree=$2; shift 2
  if [ $tree = base ]; then C="cd .carry/base &&"; else C=""; fi
  timeout 90 bash -c "$C python3 -m scripts.bench_decode $* --out_dir $D --name $name" > $D/$name.log 2>&1
  echo "$name rc=$?" >> $O/rc.txt
}
run llama_new1 new $L
run llama_base1 base $L
run llama_new2 new $L
run llama_base2 base $L
run gpt2_new new $G
run gpt2_base base $G
timeout 170 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_attention.py tests/test_decode_linear.py \
  tests/test_decode.py -k cuda > $D/tests.txt 2>&1; echo "tests rc=$? $(tail -1 $D/tests.txt)" >> $O/rc.txt
for n in llama_new1 llama_base1 llama_new2 llama_base2 gpt2_new gpt2_base; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,6 >> $O/rc.txt; done
grep -E "FAILED|Error" $D/tests.txt | head -20 >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $D

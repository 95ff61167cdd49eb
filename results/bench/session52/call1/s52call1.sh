#!/usr/bin/env bash
# Session 52 call 1 (tree in tree.txt): Tucker's factored decode step with the output cores in attention's combine
# (decode_attention's out_core; U~2's decode_linear adds up the per-head sums: one launch a layer fewer) against the
# same tree with G_o as its own GEMV (--knob model.TUCKER_CORE_IN_COMBINE=False), LLaMA-1B at batch 1 / 4k, each
# row's default form, alternating; COMBINE_CORE_HEADS 2 and 4; then the CUDA tests of the three decode test files.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c1; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
B="python3 -m scripts.bench_decode --suite llama1b --variants gqa8,tucker_32_128_128,tucker_32_64_64 --modes graph_default --batches 1 --contexts 4096 --out_dir $D"
run() { local name=$1; shift; timeout 75 $B --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run on1
run off1 --knob model.TUCKER_CORE_IN_COMBINE=False
run on2
run off2 --knob model.TUCKER_CORE_IN_COMBINE=False
run heads2 --knob COMBINE_CORE_HEADS=2
run heads4 --knob COMBINE_CORE_HEADS=4
timeout 170 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode_attention.py tests/test_decode_linear.py \
  tests/test_decode.py -k cuda > $D/tests.txt 2>&1; echo "tests rc=$? $(tail -1 $D/tests.txt)" >> $O/rc.txt
for n in on1 off1 on2 off2 heads2 heads4; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2-6 >> $O/rc.txt; done
grep -E "FAILED|Error" $D/tests.txt | head -20 >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $D

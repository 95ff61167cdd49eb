#!/usr/bin/env bash
# Session 55 call 1 (tree in tree.txt): the one-launch step (graph_mega) against the default step (graph_default)
# at 1-4 sequences and 4k cached tokens, GPT-2: MHA, MQA, Tucker [8,64,64], shared, [8,128,128]; two runs each
# mode, interleaved (default, mega, default, mega). Then one profile of each at 4 sequences (Tucker [8,128,128]).
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c1; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
V="--variants mha,mqa,tucker_8_64_64,tucker_shared_8_64_64,tucker_8_128_128 --contexts 4096 --batches 1,2,3,4 --out_dir $D"
run() { local name=$1; shift; timeout 110 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run def1 $V --modes graph_default
run mega1 $V --modes graph_mega
run def2 $V --modes graph_default
run mega2 $V --modes graph_mega
for n in def1 mega1 def2 mega2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2-6 >> $O/rc.txt; done
run prof_def --variants tucker_8_128_128 --contexts 4096 --batches 4 --out_dir $D --modes graph_default --profile_rows 25
run prof_mega --variants tucker_8_128_128 --contexts 4096 --batches 4 --out_dir $D --modes graph_mega --profile_rows 25
tar -C $O -czf $O/files.tgz files && rm -rf $D

#!/usr/bin/env bash
# Session 54 call 4 (tree in tree.txt): decode_linear's GEMV against the torch ops shape by shape at 1-4 rows
# (.carry/calls/s54micro.py, with and without PDL); GPT-2 Tucker [8,128,128] at 3-4 sequences without decode_linear's
# PDL, without the combine's PDL, and both.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c4; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
timeout 150 python3 .carry/calls/s54micro.py > $D/micro_pdl.txt 2>&1; echo "micro_pdl rc=$?" >> $O/rc.txt
MICRO_PDL=0 timeout 150 python3 .carry/calls/s54micro.py > $D/micro_nopdl.txt 2>&1; echo "micro_nopdl rc=$?" >> $O/rc.txt
G="--variants tucker_8_128_128,mha --modes graph_default --contexts 4096 --batches 2,3,4 --out_dir $D"
run() { local name=$1; shift; timeout 120 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run g_def $G
run g_nopdl $G --knob decode_linear.PDL=False
run g_nocombpdl $G --knob "decode_attention.PDL=()"
run g_none $G --knob decode_linear.PDL=False --knob "decode_attention.PDL=()" --knob model.TUCKER_PDL_SPLIT_ROWS=0
for n in g_def g_nopdl g_nocombpdl g_none; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,3,4,6 >> $O/rc.txt; done
cat $D/micro_pdl.txt $D/micro_nopdl.txt >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $D

#!/usr/bin/env bash
# Session 54 call 3 (tree in tree.txt): why a factored Tucker [8,128,128] (GPT-2) steps in 0.80 ms at 3-4 sequences
# (1.6x MHA; 0.55 at 8, 0.28 at 1) and LLaMA-1B [32,128,128] in 1.43 at 3 (GQA-8 1.20). Profiles of the default
# steps at 1-8 sequences; the split kernel's PDL off above 2 sequences; the GEMV off at 3-4 rows (all cuBLAS).
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c3; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
G="--variants tucker_8_128_128,tucker_8_64_64 --modes graph_default --contexts 4096 --out_dir $D"
L="--suite llama1b --variants gqa8,tucker_32_128_128 --modes graph_default --contexts 4096 --out_dir $D"
run() { local name=$1; shift; timeout 120 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run g_prof $G --batches 1,2,3,4,8 --profile_rows 20
run g_pdl2 $G --batches 3,4 --knob model.TUCKER_PDL_SPLIT_ROWS=2
run g_cublas $G --batches 3,4 --knob decode_linear.WIDE_ROWS_MAX_K=64
run l_prof $L --batches 2,3,4 --profile_rows 20
run l_pdl2 $L --batches 3,4 --knob model.TUCKER_PDL_SPLIT_ROWS=2
for n in g_prof g_pdl2 g_cublas l_prof l_pdl2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,3,4,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D

#!/bin/bash
# session 40 call 1: decode_wide's tile knobs not swept before at batch 32 and 16k cached (one launch):
# BN 32 (half the programs of each product, half the activation rows read from L2 per output column), BN 32 with
# the K splits doubled (the same program counts in D and F), BK 64, one program of 8 warps an SM; defaults before
# and after; MHA's default step once (the denominator).
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
run() {  # name, knobs...
  name=$1; shift
  timeout 80 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 \
      --modes graph_mega --batches 32 --contexts 16384 --out_dir $D --name $name "$@" > $D/log_$name.txt 2>&1
  echo "$name rc $?" >> $D/rc.txt
}
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 \
    --out_dir $D --name mha > $D/log_mha.txt 2>&1; echo "mha rc $?" >> $D/rc.txt
run def_a
run bn32 --knob decode_wide.BN=32
run bn32_split --knob decode_wide.BN=32 --knob decode_wide.SPLIT_D=4 --knob decode_wide.SPLIT_F=8
run bk64 --knob decode_wide.BK=64
run w8 --knob decode_wide.NUM_WARPS=8 --knob decode_wide.PROGRAMS_PER_SM=1
run def_b
for f in $D/*.md; do grep -h 'graph_mega\|graph_merged' $f | grep -v '^`' ; done > $D/summary.txt
(cd $OUT && tar czf c1.tgz c1)

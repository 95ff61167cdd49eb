#!/bin/bash
# session 37 call 1: B1's cache read through TMA tensor descriptors (decode_wide.TMA_CACHE, new, off by default):
# its CUDA test, then batch 32 at 16k cached, one launch, off / on alternating twice; MHA's default step once.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 150 python3 -m pytest -v -rs -p no:cacheprovider tests/test_decode_wide.py -k "tma" > $D/test_tma.txt 2>&1
echo "test_tma rc $?" >> $D/rc.txt
run() {  # name, knobs...
  name=$1; shift
  timeout 70 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64,mqa,mla_shared128 \
      --modes graph_mega --batches 32 --contexts 16384 --out_dir $D --name $name "$@" > $D/log_$name.txt 2>&1
  echo "$name rc $?" >> $D/rc.txt
}
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 \
    --out_dir $D --name mha > $D/log_mha.txt 2>&1; echo "mha rc $?" >> $D/rc.txt
run off_a
run tma_a --knob decode_wide.TMA_CACHE=True
run off_b
run tma_b --knob decode_wide.TMA_CACHE=True
(cd $OUT && tar czf c1.tgz c1)

#!/bin/bash
# session 34 call 6 (e6664d5, the final kernels): sampled decoding in the one-launch step (--decode=mega) beside the
# default graph mode, sampled and greedy, Tucker and Tucker shared (bench_decode's generate rows).
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
for t in 0.8 0; do
  timeout 110 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph --batches 1 \
    --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph,mega --temperature $t --iters 50 \
    --out_dir $D --name generate_t$t > $D/generate_t$t.log 2>&1
done
(cd $OUT && tar czf c6.tgz c6)

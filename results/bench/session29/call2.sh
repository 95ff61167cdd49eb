#!/bin/bash
# session 29 call 2 (issue 14): K_UP_IN_KERNEL on / off again, alternating twice at 12x1024 with MHA in each run
# (the on run first this time), then 64x256 once each.
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
A="--graph_step --master_weights"
K="--knob fused_mla_rope.K_UP_IN_KERNEL=True"
run() {  # name, timeout, args...
  local name=$1 t=$2; shift 2
  timeout $t python3 -m scripts.bench_train $A "$@" --out_dir $D --name $name > $D/log_$name.txt 2>&1
  echo "rc $?" >> $D/log_$name.txt
}
run on_3 120 --shapes 12x1024 --rope --variants mla_shared128,mha $K --precompile 2 --time_budget 110
run off_3 100 --shapes 12x1024 --rope --variants mla_shared128,mha --precompile 2 --time_budget 95
run on_4 60 --shapes 12x1024 --rope --variants mla_shared128,mha $K --time_budget 55
run off_4 60 --shapes 12x1024 --rope --variants mla_shared128,mha --time_budget 55
run on_64 60 --shapes 64x256 --rope --variants mla_shared128 $K --time_budget 55
run off_64 60 --shapes 64x256 --rope --variants mla_shared128 --time_budget 55
(cd $OUT && tar czf c2.tgz c2)

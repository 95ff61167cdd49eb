#!/bin/bash
# session 29 call 1 (issue 14): K_UP_IN_KERNEL (MLA's decoupled-RoPE key built from the 128-wide latent in one kernel):
# its CUDA tests, then the training step off / on alternating twice at 12x1024 with MHA in each run.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 130 python3 -m pytest -q -rs -p no:cacheprovider tests/test_fused_mla_rope.py tests/test_kernels_compile.py \
    -k "cuda or mla_rope" > $D/tests.txt 2>&1; echo "rc $?" >> $D/tests.txt
A="--graph_step --master_weights"
K="--knob fused_mla_rope.K_UP_IN_KERNEL=True"
run() {  # name, timeout, args...
  local name=$1 t=$2; shift 2
  timeout $t python3 -m scripts.bench_train $A "$@" --out_dir $D --name $name > $D/log_$name.txt 2>&1
  echo "rc $?" >> $D/log_$name.txt
}
run off_1 140 --shapes 12x1024 --rope both --variants mla_shared128,mha --precompile 4 --time_budget 130
run on_1 100 --shapes 12x1024 --rope --variants mla_shared128,mha $K --precompile 2 --time_budget 90
run off_2 65 --shapes 12x1024 --rope --variants mla_shared128,mha --time_budget 60
run on_2 65 --shapes 12x1024 --rope --variants mla_shared128,mha $K --time_budget 60
(cd $OUT && tar czf c1.tgz c1)

#!/bin/bash
# session 29 call 3 (issue 14), with K_UP_IN_KERNEL now the default: the MLA RoPE CUDA tests; beside them, train.py's
# 200-iteration Shakespeare loss curve of MLA shared 128 with decoupled RoPE, plain (eager, torch ops for the RoPE
# assembly, nanoGPT's loss head and GELU) against the fast path (graph_step, master weights) with K_UP_IN_KERNEL on
# and off; then the training step at 12x1024 and 64x256, learned and RoPE, MLA and MHA.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
mkdir -p data/shakespeare && cp .carry/shakespeare/* data/shakespeare/
cat > /tmp/tr.py <<'PY'
import os, sys
import fused_mla_rope as fm
fm.BACKEND = os.environ.get("FM_BACKEND", fm.BACKEND)
fm.K_UP_IN_KERNEL = os.environ.get("FM_K_UP", "1") == "1"
import train
train.main(sys.argv[1:])
PY
curve() {  # name, env, extra train args
  local m=$1 e=$2; shift 2
  env PYTHONPATH=$PWD $e timeout 300 python3 /tmp/tr.py config/shakespeare_mla_shared128.py --pos_emb=rope \
      --max_iters=200 --eval_interval=100 --log_interval=1 --save_checkpoint=False --out_dir=out-curve/mla-$m "$@" \
      > $D/curve_$m.log 2>&1; echo "rc $?" >> $D/curve_$m.log
}
curve plain "FM_BACKEND=torch" --compile=False --loss_head=logits --gelu=torch &
curve master "FM_K_UP=1" --compile=True --graph_step=True --master_weights=True &
curve master_kup_off "FM_K_UP=0" --compile=True --graph_step=True --master_weights=True &
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/test_fused_mla_rope.py tests/test_kernels_compile.py \
    -k "cuda or mla_rope" > $D/tests.txt 2>&1; echo "rc $?" >> $D/tests.txt
wait
python3 -m scripts.compare_runs out-curve/mla-plain out-curve/mla-master out-curve/mla-master_kup_off --out $D/curve \
    --name mla_shared128_rope --title "GPT-2 124M MLA shared 128, decoupled RoPE, Shakespeare 64 x 256, bf16: plain vs fast" \
    > $D/compare.txt 2>&1
A="--graph_step --master_weights"
timeout 175 python3 -m scripts.bench_train $A --shapes 12x1024 --rope both --variants mla_shared128,mha --precompile 4 \
    --time_budget 165 --out_dir $D --name kup_12x1024 > $D/log_kup_12x1024.txt 2>&1; echo "rc $?" >> $D/log_kup_12x1024.txt
timeout 150 python3 -m scripts.bench_train $A --shapes 64x256 --rope both --variants mla_shared128,mha --precompile 4 \
    --time_budget 140 --out_dir $D --name kup_64x256 > $D/log_kup_64x256.txt 2>&1; echo "rc $?" >> $D/log_kup_64x256.txt
(cd $OUT && tar czf c3.tgz c3)

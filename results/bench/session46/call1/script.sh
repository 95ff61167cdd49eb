#!/usr/bin/env bash
# session 46 call 1: the CUDA tests of the files changed this session (master_adamw's new tests, train.py's loop
# factored out, the checkpoint's message), Ctrl-C on a compiled graph_step run and its resume, then gpu_smoke.sh
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
C=$OUT/c1; mkdir -p $C
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $C/tests.log
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $C/tests.log
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_master_adamw.py tests/test_graph_step.py \
  tests/test_train.py tests/test_checkpoint.py -k "cuda or gpu" >> $C/tests.log 2>&1
echo "tests rc=$?" > $C/rc.txt
# Ctrl-C (SIGINT) in a compiled graph_step run on the GPU, past its checkpoint of iteration 4; then the resume
D=$C/int; mkdir -p $D
python3 -m data.shakespeare.prepare --out_dir $D/data > /dev/null 2>&1
A="--data_dir=$D/data --n_layer=2 --n_head=4 --n_embd=64 --block_size=64 --attn=tucker --tucker_ranks=4,16,16
   --pos_emb=rope --batch_size=4 --eval_interval=4 --eval_iters=2 --log_interval=1 --warmup_iters=1
   --lr_decay_iters=2000 --compile=True --graph_step=True --always_save_checkpoint=True --out_dir=$D/run"
python3 train.py $A --max_iters=2000 > $D/run.out 2> $D/run.err &
P=$!
for i in $(seq 1 1200); do
  if [ -f $D/run/log.jsonl ] && python3 - "$D/run/log.jsonl" <<'PY'
import json, sys
sys.exit(0 if any(json.loads(l).get("iter", 0) >= 9 and "loss" in json.loads(l) for l in open(sys.argv[1])) else 1)
PY
  then break; fi
  sleep 0.1
done
kill -INT $P; wait $P; echo "sigint rc=$?" >> $C/rc.txt
{ echo "--- run.err tail"; tail -3 $D/run.err; } >> $C/int.log
timeout 200 python3 train.py $A --max_iters=12 --init_from=resume > $D/res.out 2> $D/res.err
echo "resume rc=$?" >> $C/rc.txt
{ echo "--- resume stdout tail"; tail -4 $D/res.out; echo "--- resume err tail"; tail -3 $D/res.err; } >> $C/int.log
OUT=$C STEP_TIMEOUT=150 bash scripts/gpu_smoke.sh > $C/smoke.log 2>&1
echo "smoke rc=$?" >> $C/rc.txt; cat $C/smoke/rc.txt >> $C/rc.txt
# keep the files few (only a handful come back): the smoke's errors of any failed step, then the work folders go
for f in $C/smoke/*.err; do n=$(basename $f .err); grep -q "^$n rc=0$" $C/smoke/rc.txt || { echo "=== $n"; tail -20 $f; }; done > $C/smoke_failed.log
tail -5 $C/smoke/s_comp.out > $C/smoke_sample_tail.log 2>/dev/null
rm -rf $C/smoke $D

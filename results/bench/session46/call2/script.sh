#!/usr/bin/env bash
# session 46 call 2: call 1's CUDA tests with room (master_adamw's new tests, train.py's loop factored out, the
# checkpoint's message), and Ctrl-C on a compiled graph_step run on the GPU, then its resume
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
C=$OUT/c2; mkdir -p $C
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $C/tests.log
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $C/tests.log
D=$C/int; mkdir -p $D
python3 -m data.shakespeare.prepare --out_dir $D/data > /dev/null 2>&1
A="--data_dir=$D/data --n_layer=2 --n_head=4 --n_embd=64 --block_size=64 --attn=tucker --tucker_ranks=4,16,16
   --pos_emb=rope --batch_size=4 --eval_interval=4 --eval_iters=2 --log_interval=1 --warmup_iters=1
   --lr_decay_iters=20000 --compile=True --graph_step=True --always_save_checkpoint=True --out_dir=$D/run"
set -m  # job control: a background job of a non-interactive bash otherwise ignores SIGINT (call 1's run did)
python3 train.py $A --max_iters=20000 > $D/run.out 2> $D/run.err &
P=$!
set +m
for i in $(seq 1 3000); do
  if [ -f $D/run/log.jsonl ] && python3 - "$D/run/log.jsonl" <<'PY'
import json, sys
sys.exit(0 if any(json.loads(l).get("iter", 0) >= 9 and "loss" in json.loads(l) for l in open(sys.argv[1])) else 1)
PY
  then break; fi
  sleep 0.1
done
kill -INT $P; wait $P; echo "sigint rc=$? (130: ended by SIGINT)" > $C/rc.txt
{ echo "--- run.err tail"; tail -3 $D/run.err; grep -c Traceback $D/run.err; } > $C/int.log
timeout 200 python3 train.py $A --max_iters=12 --init_from=resume > $D/res.out 2> $D/res.err
echo "resume rc=$?" >> $C/rc.txt
{ echo "--- resume stdout tail"; tail -3 $D/res.out; echo "--- resume err tail"; tail -3 $D/res.err; } >> $C/int.log
rm -rf $D
# generate's prompt check on CUDA: an id past the vocabulary is a ValueError, and the CUDA context still works after
python3 - > $C/vocab.log 2>&1 <<'PY'
import torch
from model import GPT, GPTConfig
m = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=96, attn="tucker", tucker_ranks=(2, 16, 16))).cuda().eval()
try:
    m.generate(torch.full((1, 4), 100, device="cuda"), 3)
    print("no error")
except ValueError as e:
    print("ValueError:", e)
print("after:", m.generate(torch.zeros((1, 4), dtype=torch.long, device="cuda"), 3, temperature=0).tolist())
PY
echo "vocab rc=$?" >> $C/rc.txt
timeout 300 python3 -m pytest -q -p no:cacheprovider --durations=5 tests/test_decode.py tests/test_model.py -k "cuda or gpu or graph" > $C/tests_decode.log 2>&1
echo "decode/model tests rc=$?" >> $C/rc.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider --durations=5 tests/test_train.py tests/test_checkpoint.py tests/test_graph_step.py tests/test_sample.py -k "cuda or gpu" >> $C/tests.log 2>&1
echo "tests rc=$?" >> $C/rc.txt

#!/bin/bash
# session 28 call 2 (issue 14): MLA's decoupled-RoPE query in place (fused_mla_rope.Q_IN_PLACE) off / on, alternating
# twice at 12x1024 with MHA in each run (MLA rope x MHA rope, RoPE cost), then 64x256 once each; inductor's output code
# of a compiled MLA step with it on (is the rotation in place?).
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
A="--graph_step --master_weights"
K="--knob fused_mla_rope.Q_IN_PLACE=True"
run() {  # name, timeout, args...
  local name=$1 t=$2; shift 2
  timeout $t python3 -m scripts.bench_train $A "$@" --out_dir $D --name $name > $D/log_$name.txt 2>&1
  echo "rc $?" >> $D/log_$name.txt
}
run off_1 140 --shapes 12x1024 --rope both --variants mla_shared128,mha --precompile 4 --time_budget 130
run on_1 120 --shapes 12x1024 --rope both --variants mla_shared128,mha $K --precompile 2 --time_budget 110
run off_2 75 --shapes 12x1024 --rope both --variants mla_shared128,mha --time_budget 70
run on_2 75 --shapes 12x1024 --rope both --variants mla_shared128,mha $K --time_budget 70
run off_64 60 --shapes 64x256 --rope --variants mla_shared128 --time_budget 55
run on_64 60 --shapes 64x256 --rope --variants mla_shared128 $K --time_budget 55
cat > /tmp/oc.py <<'PY'
import torch, fused_mla_rope as fm, sys
from model import GPT, GPTConfig
fm.Q_IN_PLACE = True
torch.manual_seed(0)
m = GPT(GPTConfig(n_layer=1, n_head=12, n_embd=768, block_size=256, vocab_size=50304, bias=False, attn="mla",
                  q_rank=128, kv_rank=128, shared_kv=True, pos_emb="rope", mla_rope="decoupled")).cuda()
x = torch.randint(0, 50304, (4, 256), device="cuda")
with torch.autocast("cuda", dtype=torch.bfloat16):
    _, loss = torch.compile(m)(x, x)
loss.backward()
torch.cuda.synchronize()
print("ok", loss.item())
PY
PYTHONPATH=$PWD TORCH_LOGS=output_code timeout 60 python3 /tmp/oc.py > $D/output_code_q1.txt 2>&1; echo "rc $?" >> $D/output_code_q1.txt
(cd $OUT && tar czf c2.tgz c2)

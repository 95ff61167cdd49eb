#!/bin/bash
# session 28 call 1 (issue 14): MLA's decoupled-RoPE query rotated in place (fused_mla_rope.Q_IN_PLACE): CUDA tests,
# inductor's output code of a compiled MLA step (is the rotation in place?), then the training step off / on.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 150 python3 -m pytest -q -rs tests/test_fused_mla_rope.py tests/test_kernels_compile.py -k "cuda or mla_rope" \
    > $D/tests.txt 2>&1; echo "rc $?" >> $D/tests.txt
cat > /tmp/oc.py <<'PY'
import torch, fused_mla_rope as fm, sys
from model import GPT, GPTConfig
fm.Q_IN_PLACE = sys.argv[1] == "1"
torch.manual_seed(0)
m = GPT(GPTConfig(n_layer=1, n_head=12, n_embd=768, block_size=256, vocab_size=50304, bias=False, attn="mla",
                  q_rank=128, kv_rank=128, shared_kv=True, pos_emb="rope", mla_rope="decoupled")).cuda()
x = torch.randint(0, 50304, (4, 256), device="cuda")
step = torch.compile(m)
with torch.autocast("cuda", dtype=torch.bfloat16):
    _, loss = step(x, x)
loss.backward()
torch.cuda.synchronize()
print("ok", loss.item())
PY
for q in 0 1; do
  TORCH_LOGS=output_code timeout 120 python3 /tmp/oc.py $q > $D/output_code_q$q.txt 2>&1; echo "rc $?" >> $D/output_code_q$q.txt
done
A="--graph_step --master_weights"
timeout 190 python3 -m scripts.bench_train $A --shapes 12x1024,64x256 --rope both --variants mla_shared128,mha \
    --precompile 4 --time_budget 180 --profile mla_shared128 --out_dir $D --name off_1 > $D/log_off_1.txt 2>&1
echo "rc $?" >> $D/log_off_1.txt
timeout 130 python3 -m scripts.bench_train $A --shapes 12x1024,64x256 --rope --variants mla_shared128 \
    --knob fused_mla_rope.Q_IN_PLACE=True --precompile 2 --time_budget 120 --profile mla_shared128 \
    --out_dir $D --name on_1 > $D/log_on_1.txt 2>&1
echo "rc $?" >> $D/log_on_1.txt
(cd $OUT && tar czf c1.tgz c1)

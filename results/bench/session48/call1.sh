#!/usr/bin/env bash
# Session 48 call 1: the kernels sized to the GPU's shared memory (34f23e0+). The device's numbers; MLA's K from a
# 512-wide latent at the old settings (64 rows, 3 stages) and at k_up_launch's; the CUDA tests of fused_mla_rope, the
# new decode_wide ones (one program an SM: a GPU of 100 KB an SM simulated, fp32 weights) and a few of the unchanged
# paths; train.py with MLA's decoupled RoPE over a 512-wide latent, compiled.
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c1; mkdir -p $O
P="python3 -m pytest -q -rs -p no:cacheprovider --durations=5"
W="tests/test_decode_wide.py::test_cuda_wide_one_launch_matches_the_phases_and_the_model"
$P tests/test_decode_wide.py -k "one_program_an_sm or timed_step" "$W[tucker-32]" "$W[tucker_shared-32]" > $O/wide.log 2>&1 & W1=$!
$P tests/test_decode_mega.py -k "cuda and (defaults or refused or generate)" > $O/mega.log 2>&1 & M=$!
$P tests/test_fused_mla_rope.py -k "cuda" > $O/mla_rope.log 2>&1 & R=$!
python3 - > $O/device_and_k_up.log 2>&1 <<'PY'
import time, torch, triton
import decode_attention as da, fused_mla_rope as fm
from model import GPT, GPTConfig
p = torch.cuda.get_device_properties(0)
print("device", p.name, "cc", (p.major, p.minor), "sms", p.multi_processor_count)
for name in ("shared_memory_per_block", "shared_memory_per_block_optin", "shared_memory_per_multiprocessor",
             "regs_per_multiprocessor", "max_threads_per_multi_processor"):
    print(name, getattr(p, name, "absent"))
print("triton driver", triton.runtime.driver.active.utils.get_device_properties(0))
print("decode_attention.shared_memory", da.shared_memory(torch.device("cuda", 0)))
print("torch", torch.__version__, "triton", triton.__version__)
cfg = dict(n_layer=2, n_head=12, n_embd=768, block_size=256, vocab_size=512, attn="mla", q_rank=512, kv_rank=512,
           shared_kv=True, pos_emb="rope", mla_rope="decoupled", bias=False, dropout=0.0)
x = torch.randint(0, 512, (8, 256), device="cuda")
real = fm.k_up_launch
for label, launch in (("old settings (64 rows, 3 stages)", lambda *a: (fm.K_UP_ROWS, 3)), ("k_up_launch", real)):
    fm.k_up_launch = launch
    torch.manual_seed(0)
    model = GPT(GPTConfig(**cfg)).cuda()
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = model(x, targets=x)
        loss.backward()
        torch.cuda.synchronize()
        print(label, "ran: loss", round(loss.item(), 4), "launch", real(512, 64, 2, da.shared_memory(x.device)[0]))
    except Exception as e:
        print(label, "failed:", type(e).__name__, str(e)[:300].replace("\n", " "))
fm.k_up_launch = real
PY
python3 -m data.shakespeare.prepare --input $TUCKER_SHAKESPEARE_TXT --tokenizer $TUCKER_GPT2_TIKTOKEN --out_dir /tmp/shk > $O/prep.log 2>&1
( time python3 train.py config/shakespeare_mla_shared128.py --data_dir=/tmp/shk --out_dir=/tmp/mla512 --kv_rank=512 \
    --q_rank=512 --pos_emb=rope --mla_rope=decoupled --max_iters=30 --eval_interval=30 --eval_iters=2 \
    --eval_full_val=False --batch_size=16 --compile=True ) > $O/train_mla512.log 2>&1
echo "train_mla512 rc=$?" > $O/rc.txt
wait $W1; echo "wide=$?" >> $O/rc.txt; wait $M; echo "mega=$?" >> $O/rc.txt; wait $R; echo "mla_rope=$?" >> $O/rc.txt
for f in $O/*.log; do echo "$f: $(tail -1 $f)"; done >> $O/rc.txt

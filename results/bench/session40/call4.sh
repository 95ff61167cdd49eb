#!/bin/bash
# session 40 call 4: call 3's greedy texts were all newlines (60 iterations sit on the fixed table's plateau), so
# equal trivially. Here: random-init models with pos_emb='sinusoidal' (bf16, CUDA), greedy generate in each decode
# mode against eager at batch 1 and 8 (one launch: decode_mega at 1, decode_wide at 8); and the quickstart trained 300
# iterations, sample.py greedy per mode.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 200 python3 - > $D/generate.txt 2>&1 <<'PY'
import torch
from model import GPT, GPTConfig
for kw in (dict(attn="mha"), dict(attn="tucker", tucker_ranks=(4, 32, 32)),
           dict(attn="tucker", tucker_ranks=(4, 32, 32), shared_kv=True), dict(attn="mla", kv_rank=64, q_rank=64)):
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=256, vocab_size=50304, pos_emb="sinusoidal",
                      bias=False, **kw)).cuda().to(torch.bfloat16).eval()
    for batch in (1, 8):
        idx = torch.randint(0, 50304, (batch, 16), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
        outs = {mode: m.generate(idx, 100, temperature=0, decode=mode) for mode in ("eager", "graph", "mega")}
        new = outs["eager"][:, 16:]
        print(kw, "batch", batch, "distinct tokens", new.unique().numel(),
              {mode: f"{(o[:, 16:] == new).float().mean().item():.3f}" for mode, o in outs.items()})
PY
echo "generate rc $?" >> $D/rc.txt
python3 -m data.shakespeare.prepare > $D/prepare.txt 2>&1
Q="config/quickstart_tucker.py --pos_emb=sinusoidal --max_iters=300 --lr_decay_iters=300 --eval_interval=100"
timeout 150 python3 train.py $Q --out_dir=$D/run > $D/train.txt 2>&1; echo "train rc $?" >> $D/rc.txt
for mode in eager graph mega; do
  timeout 90 python3 sample.py --out_dir=$D/run --start="ROMEO:" --temperature=0 --num_samples=2 --max_new_tokens=100 \
      --decode=$mode > $D/sample_$mode.txt 2> $D/sample_$mode.err; echo "sample_$mode rc $?" >> $D/rc.txt
done
cmp $D/sample_eager.txt $D/sample_graph.txt && echo "graph = eager" >> $D/rc.txt
cmp $D/sample_eager.txt $D/sample_mega.txt && echo "mega = eager" >> $D/rc.txt
rm -f $D/run/ckpt.pt
(cd $OUT && tar czf c4.tgz c4)

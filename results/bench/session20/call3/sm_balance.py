"""Session 20 call 3: the fused MLP's work per program, by whether the other program on its SM also has an MLP tile.
Reads tucker_8_64_64_mlp_work.json (taken from one timed step's stamps, `profile_mega --barriers --dump`: each
program's SM and its MLP work in each layer).
    python results/bench/session20/call3/sm_balance.py"""
import json
from pathlib import Path

import torch

d = json.loads(Path(__file__).with_name("tucker_8_64_64_mlp_work.json").read_text())
sm = torch.tensor(d["sm"])
work = torch.tensor(d["mlp_work_us"])  # (layers, programs)
P = sm.numel()
partner = torch.tensor([[q for q in (sm == sm[p]).nonzero().flatten().tolist() if q != p][0] for p in range(P)])
print("programs 0-7 on SMs", sm[:8].tolist(), "; partners of programs 0-3:", partner[:4].tolist())
busy = torch.arange(P) < 192  # GPT-2 at batch 1: 192 MLP tiles of 16 hidden units, tile t on program t
both, alone = busy & busy[partner], busy & ~busy[partner]
mean = work.mean(0)
last = work.argmax(dim=1)
print(f"MLP tiles: {int(both.sum())} programs share their SM with another tile, {int(alone.sum())} do not")
print(f"their work a layer (mean over layers): {mean[both].mean():.2f} / {mean[alone].mean():.2f} us")
print(f"last arrival a layer: {[round(x, 2) for x in work.max(dim=1).values.tolist()]}")
print(f"last arrivals on an SM with two tiles: {float(both[last].double().mean()):.2f} of them")

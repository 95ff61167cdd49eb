"""Session 20 call 3: the fused MLP's work per program, by whether the other program on its SM also has an MLP tile.
Reads tucker_8_64_64_stamps.pt (profile_mega --barriers --dump: (steps, programs, 5 L + 2, 4) int64, the timed step's
stamps, slot 0's third column the program's SM; the first of the 10 steps kept here).
    python results/bench/session20/call3/sm_balance.py"""
from pathlib import Path

import torch

S = torch.load(Path(__file__).with_name("tucker_8_64_64_stamps.pt")).double()
steps, P, slots, _ = S.shape
L = (slots - 2) // 5
sm = S[0, :, 0, 2].long()
partner = torch.tensor([[q for q in (sm == sm[p]).nonzero().flatten().tolist() if q != p][0] for p in range(P)])
print("programs 0-7 on SMs", sm[:8].tolist(), "; partners of programs 0-3:", partner[:4].tolist())
busy = torch.arange(P) < 192  # GPT-2 at batch 1: 192 MLP tiles of 16 hidden units, tile t on program t
both, alone = busy & busy[partner], busy & ~busy[partner]
work = torch.stack([(S[:, :, 5 * l + 5, 0] - S[:, :, 5 * l + 3, 2]) / 1e3 for l in range(L)])  # (L, steps, P) us
mean = work.median(dim=1).values.mean(0)
last = work.argmax(dim=2).flatten()
print(f"MLP tiles: {int(both.sum())} programs share their SM with another tile, {int(alone.sum())} do not")
print(f"their work a layer (median over steps, mean over layers): {mean[both].mean():.2f} / {mean[alone].mean():.2f} us")
print(f"last arrival a layer (median over steps): {[round(x, 2) for x in work.max(dim=2).values.median(dim=1).values.tolist()]}")
print(f"last arrivals on an SM with two tiles: {float(both[last].double().mean()):.2f} of them")

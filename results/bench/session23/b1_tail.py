"""B1's tail at batch 32 and 16k from one-launch steps' stamps (profile_mega --barriers --dump, session 23 call 7):
per program, B1's work (A's release to its own B1 arrival) over every layer of every step; the spread, whether the
same programs (or SMs) are the last again and again, and whether a program's item or its SM mate explains it.

    python results/bench/session23/b1_tail.py DIR/tucker_8_64_64_stamps.pt [--splits 8]   # DIR: --dump's folder

Stamps (steps, programs, slots, 4): slot 0 (start ns, start cycles, SM, 0), slot 1 the embeddings' barrier, slot
2 + 6 l + i layer l's barrier after phase i (A, B1, B2, D, E, F), each (arrive ns, cycles, release ns, cycles).
Items at batch 32 on 264 programs: program p < 256 reads sequence p // 8, split p % 8 (split 7 the shortest)."""
import argparse
from collections import Counter

import torch

p = argparse.ArgumentParser()
p.add_argument("stamps")
p.add_argument("--splits", type=int, default=8)
a = p.parse_args()
st = torch.load(a.stamps).double()
steps, P, slots, _ = st.shape
L = (slots - 3) // 6
sm = st[0, :, 0, 2].long()
a_rel = torch.stack([st[:, :, 2 + 6 * l + 0, 2] for l in range(L)], 1)  # (steps, L, P) A's release
b_arr = torch.stack([st[:, :, 2 + 6 * l + 1, 0] for l in range(L)], 1)  # B1's arrival
rel_med = a_rel.median(dim=2, keepdim=True).values
work = (b_arr - rel_med) / 1e3  # us, from A's median release
busy = torch.arange(P) < 32 * a.splits
last_split = (torch.arange(P) % a.splits == a.splits - 1) & busy
w = work[:, :, busy]
print(f"{a.stamps}: {steps} steps x {L} layers, {P} programs ({int(busy.sum())} with an item), {len(set(sm.tolist()))} SMs")
print(f"B1 work a layer, us (busy programs): median {w.median():.2f}, 90th {w.quantile(0.9):.2f}, max per layer "
      f"(median over layers) {w.amax(2).median():.2f}; last - median per layer: "
      f"{(w.amax(2) - w.median(2).values).median():.2f}")
full = busy & ~last_split
print(f"  full splits: median {work[:, :, full].median():.2f}; last splits (shorter): median "
      f"{work[:, :, last_split].median():.2f}")
# who is last, and is it the same program / SM every time
lastp = work.masked_fill(~busy, -1e9).argmax(2).flatten()
c = Counter(lastp.tolist())
print(f"the last program of each of {lastp.numel()} layers: {len(c)} distinct; most often: "
      + ", ".join(f"p{k} (SM {int(sm[k])}, seq {k // a.splits} split {k % a.splits}) x{n}" for k, n in c.most_common(6)))
cs = Counter(sm[lastp].tolist())
print(f"their SMs: {len(cs)} distinct; most often: " + ", ".join(f"SM {k} x{n}" for k, n in cs.most_common(6)))
# rank correlation of a program's B1 time across layers (is slowness a property of the program?)
mean_p = work[:, :, busy].mean((0, 1))
rank = work[:, :, busy].argsort(2).argsort(2).double()
r = torch.corrcoef(rank.reshape(-1, int(busy.sum())))
off = r[~torch.eye(r.shape[0], dtype=torch.bool)]
print(f"rank correlation of programs' B1 times between any two layers: median {off.median():.2f}")
# SM mates: programs sharing an SM
mates = {}
for i in range(P):
    mates.setdefault(int(sm[i]), []).append(i)
alone = torch.tensor([len([j for j in mates[int(sm[i])] if busy[j]]) == 1 for i in range(P)])
print(f"programs an SM: {Counter(len(v) for v in mates.values())}; busy programs with an idle mate: "
      f"{int((alone & busy).sum())}, their median {work[:, :, alone & busy].median():.2f} us")
mate_last = torch.tensor([any(last_split[j] for j in mates[int(sm[i])] if j != i) for i in range(P)])
print(f"full-split programs whose mate has a last (short) split: {int((mate_last & full).sum())}, median "
      f"{work[:, :, mate_last & full].median():.2f}; the others {work[:, :, ~mate_last & full].median():.2f}")
# slowest programs on average
top = mean_p.argsort(descending=True)[:8]
ids = torch.arange(P)[busy]
print("slowest on average: " + ", ".join(f"p{int(ids[t])} SM {int(sm[ids[t]])} {mean_p[t]:.2f}" for t in top))
print(f"fastest on average: {mean_p.min():.2f}, slowest {mean_p.max():.2f}, spread of the average "
      f"{(mean_p.max() - mean_p.min()):.2f} us")
# GPC-ish grouping: SM id // 18 (a guess at the layout; only to see whether neighbours share slowness)
by = {}
for i in ids.tolist():
    by.setdefault(int(sm[i]) // 18, []).append(mean_p[(ids == i).nonzero()[0, 0]].item())
print("mean B1 work by SM // 18: " + ", ".join(f"{k}: {sum(v) / len(v):.2f} ({len(v)})" for k, v in sorted(by.items())))

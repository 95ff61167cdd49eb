"""Session 33 diagnosis: where a sampled decode token's extra GPU time goes. Every piece of model.sample_next
timed alone, replayed from a CUDA graph (scripts.bench_decode_kernel.time_graph: us per call, median of 7), at
GPT-2's padded vocabulary (50,304 bf16 logits a row, 50,257 kept), batch 1 and 32; then the kernels of one
sample_next call under torch.profiler. Run from the repository root: python3 results/bench/session33/diag_sample.py"""
import json
import sys

sys.path.insert(0, ".")
import torch
import torch.nn.functional as F

from model import sample_next
from scripts.bench_decode_kernel import time_graph


def two_stage_kth(lf, k, chunk=1024):
    """The k-th largest of each row from per-chunk top-k candidates (many rows at once), then one top-k of those."""
    B, V = lf.shape
    pad = (-V) % chunk
    x = F.pad(lf, (0, pad), value=float("-inf")).view(B, -1, chunk)  # (B, nC, chunk)
    cand = torch.topk(x, min(k, chunk), dim=-1).values.reshape(B, -1)  # (B, nC * k)
    return torch.topk(cand, k, dim=-1).values[:, -1:]


rows = []
for B in (1, 32):
    logits = (torch.randn(B, 50304, device="cuda") * 3).to(torch.bfloat16)
    finite = torch.ones((), dtype=torch.bool, device="cuda")
    lf = logits[:, :50257].float() / 0.8
    q = torch.empty_like(lf).exponential_(1)
    cases = {
        "sample_next t=0.8 top_k=200": lambda: sample_next(logits, 0.8, 200, None, 50257, finite),
        "sample_next t=0.8 no top_k": lambda: sample_next(logits, 0.8, None, None, 50257, finite),
        "sample_next greedy": lambda: sample_next(logits, 0, None, None, 50257, finite),
        "slice+float+div": lambda: logits[:, :50257].float() / 0.8,
        "topk 200 (fp32)": lambda: torch.topk(lf, 200, dim=-1),
        "topk 200 (bf16 logits)": lambda: torch.topk(logits[:, :50257], 200, dim=-1),
        "kth by two-stage topk": lambda: two_stage_kth(lf, 200),
        "where(< kth)": lambda: torch.where(lf < lf[:, :1], float("-inf"), lf),
        "softmax": lambda: F.softmax(lf, dim=-1),
        "isfinite.all &=": lambda: finite.__iand__(torch.isfinite(lf).all()),
        "exponential_": lambda: torch.empty_like(lf).exponential_(1),
        "(p / q).argmax": lambda: (lf / q).argmax(dim=-1),
    }
    for name, fn in cases.items():
        us = time_graph(fn, steps=20, reps=7)
        rows.append(dict(batch=B, case=name, us=us))
        print(f"B={B:2d} {name:28s} {us:8.1f} us", flush=True)
    kth = torch.topk(lf, 200, dim=-1).values[:, -1:]
    print(f"B={B} two-stage kth equals topk's: {torch.equal(two_stage_kth(lf, 200), kth)}", flush=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            sample_next(logits, 0.8, 200, None, 50257, finite)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=20), flush=True)
json.dump(rows, open(sys.argv[1] if len(sys.argv) > 1 else "diag_sample.json", "w"), indent=1)

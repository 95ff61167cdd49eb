"""Session 54: decode_linear's GEMV against F.linear (+ the torch norm / residual) shape by shape at 1-4 rows,
20 calls chained in one captured CUDA graph (each reads the previous call's output where the shapes allow, else
independent), median of 30 replays, microseconds a call."""
import statistics, sys, torch
import decode_linear as dl
import model as m
torch.manual_seed(0)
dev = torch.device("cuda")
dt = torch.bfloat16
import os
dl.PDL = os.environ.get("MICRO_PDL", "1") == "1"
print("decode_linear.PDL =", dl.PDL)
SHAPES = [  # name, K, N, norm, act, residual
    ("gpt2 W_down", 768, 384, True, None, False),
    ("gpt2 G_q", 128, 1536, False, None, False),
    ("gpt2 U~2+res", 128, 768, False, None, True),
    ("gpt2 fc", 768, 3072, True, "gelu", False),
    ("gpt2 merged qkv", 768, 1024, True, None, False),
    ("llama W_down", 2048, 384, True, None, False),
    ("llama G_q", 128, 4096, False, None, False),
    ("llama U~2+res", 128, 2048, False, None, True),
    ("llama G_o", 4096, 128, False, None, False),
]
def timeit(fn, reps=20, replays=30):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps): fn()
    ts = []
    for _ in range(replays):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record(); g.replay(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) * 1000 / reps)
    return statistics.median(ts)
print(f"{'shape':18s} {'M':>2s} {'gemv us':>8s} {'torch us':>8s}  config")
for name, K, N, has_norm, act, has_res in SHAPES:
    norm = m.RMSNorm(K).to(dev, dt) if has_norm else None
    w = (torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5)
    for M in (1, 2, 3, 4):
        a = torch.randn(M, K, device=dev, dtype=dt)
        res = torch.randn(M, N, device=dev, dtype=dt) if has_res else None
        def gemv(): return dl.launch(a, w, norm=norm, act=act, residual=res)
        def tor(): return dl.decode_linear(a, w, norm=norm, act=act, residual=res, backend="torch")
        try:
            tg = timeit(gemv)
        except Exception as e:
            tg = float("nan"); print("  gemv failed:", str(e)[:100])
        tt = timeit(tor)
        print(f"{name:18s} {M:2d} {tg:8.2f} {tt:8.2f}  {dl._config(M, N, K, dev)}", flush=True)

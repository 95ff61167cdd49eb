"""Session 54: decode_linear's GEMV against the torch ops (cuBLAS) for the large weights at 1-4 rows: the LM heads,
LLaMA-1B's MLP; 10 calls in one captured CUDA graph, median of 20 replays, microseconds a call."""
import statistics, torch
import decode_linear as dl
import model as m
torch.manual_seed(0)
dev, dt = torch.device("cuda"), torch.bfloat16
SHAPES = [("gpt2 lm head", 768, 50304, True, None), ("gpt2 fc", 768, 3072, True, "gelu"),
          ("gpt2 mlp proj", 3072, 768, False, None), ("llama gate/up", 2048, 8192, True, "swiglu"),
          ("llama down", 8192, 2048, False, None), ("llama qkv gqa8", 2048, 3072, True, None),
          ("llama o", 2048, 2048, False, None), ("llama lm head", 2048, 128256, True, None)]
def timeit(fn, reps=10, replays=20):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
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
print(f"{'shape':16s} {'M':>2s} {'gemv':>8s} {'pairs':>8s} {'torch':>8s}  config")
for name, K, N, has_norm, act in SHAPES:
    norm = m.RMSNorm(K).to(dev, dt) if has_norm else None
    w = torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5
    w2 = torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5 if act == "swiglu" else None
    for M in (1, 2, 3, 4):
        a = torch.randn(M, K, device=dev, dtype=dt)
        gemv = lambda: dl.launch(a, w, norm=norm, act=act, weight2=w2)
        t_g = timeit(gemv)
        dl.PAIR_ROWS_MAX_K = 1 << 30
        t_p = timeit(gemv) if M > 2 else float("nan")
        dl.PAIR_ROWS_MAX_K = 0
        t_t = timeit(lambda: dl.decode_linear(a, w, norm=norm, act=act, weight2=w2, backend="torch"))
        print(f"{name:16s} {M:2d} {t_g:8.2f} {t_p:8.2f} {t_t:8.2f}  {dl._config(M, N, K, dev)}", flush=True)

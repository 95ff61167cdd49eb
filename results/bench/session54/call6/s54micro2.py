"""Session 54: decode_linear's GEMV at 3-4 rows, config by config: the default (rows in one block of 4), rows in
blocks of 2 (two programs a column block), and the 3D product (PRODUCT_2D False); 20 calls in one captured CUDA
graph, median of 30 replays, microseconds a call."""
import statistics, torch
import decode_linear as dl
import model as m
torch.manual_seed(0)
dev, dt = torch.device("cuda"), torch.bfloat16
SHAPES = [("gpt2 W_down", 768, 384, True, None, False), ("gpt2 G_q", 128, 1536, False, None, False),
          ("gpt2 U~2+res", 128, 768, False, None, True), ("gpt2 fc", 768, 3072, True, "gelu", False),
          ("gpt2 merged qkv", 768, 1024, True, None, False), ("gpt2 c_proj+res", 768, 768, False, None, True),
          ("gpt2 G_q 64", 64, 768, False, None, False), ("llama G_q", 128, 4096, False, None, False),
          ("llama U~2+res", 128, 2048, False, None, True), ("llama W_down", 2048, 384, True, None, False),
          ("llama G_o", 4096, 128, False, None, False), ("gpt2 lm head", 768, 50304, True, None, False)]
orig_config = dl._config
def config_rows2(M, N, K, device):
    return orig_config(min(M, 2), N, K, device)
def timeit(fn, reps=20, replays=30):
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
print(f"{'shape':18s} {'M':>2s} {'default':>8s} {'rows2':>8s} {'3D':>8s} {'torch':>8s}  default config / rows2 config")
for name, K, N, has_norm, act, has_res in SHAPES:
    norm = m.RMSNorm(K).to(dev, dt) if has_norm else None
    w = torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5
    for M in (2, 3, 4):
        a = torch.randn(M, K, device=dev, dtype=dt)
        res = torch.randn(M, N, device=dev, dtype=dt) if has_res else None
        gemv = lambda: dl.launch(a, w, norm=norm, act=act, residual=res)
        ref = dl.decode_linear(a, w, norm=norm, act=act, residual=res, backend="torch")
        t_def = timeit(gemv)
        dl._config = config_rows2
        out2 = gemv(); t_2 = timeit(gemv)
        dl._config = orig_config
        dl.PRODUCT_2D = False
        out3 = gemv(); t_3 = timeit(gemv)
        dl.PRODUCT_2D = True
        t_t = timeit(lambda: dl.decode_linear(a, w, norm=norm, act=act, residual=res, backend="torch"))
        err = max((out2.float() - ref.float()).abs().max().item(), (out3.float() - ref.float()).abs().max().item())
        print(f"{name:18s} {M:2d} {t_def:8.2f} {t_2:8.2f} {t_3:8.2f} {t_t:8.2f}  {orig_config(M, N, K, dev)} / "
              f"{config_rows2(M, N, K, dev)}  max err {err:.3g}", flush=True)

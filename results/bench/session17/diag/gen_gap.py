"""Where generate's time goes with decode='graph' and 'mega': wall per token, host time per token (enqueue only),
and variants of the loop (no sampling; sampling without the output write)."""
import sys, time, argparse
sys.path.insert(0, ".")
import torch
from scripts.bench_decode import build_model
from scripts.bench_train import VARIANTS
from model import sample_next

dev = torch.device("cuda")
name = sys.argv[1] if len(sys.argv) > 1 else "tucker_8_64_64"
variant = next(v for v in VARIANTS if v.id == name)
model = build_model(variant, argparse.Namespace(tiny=False, rope=False), 1024, dev)
prompt = torch.randint(50304, (1, 16), device=dev)
N = 300
for mega in (False, True, False, True):
    dec = model.static_decoder(1, dev, use_graph=True, mega=mega)
    out = torch.zeros(1, 16 + N + 8, dtype=torch.long, device=dev)
    out[:, :16] = prompt
    for mode in ("full", "no_sample", "sample_no_write"):
        dec.pos = None
        logits = dec.prefill(prompt)
        n = 16
        for _ in range(5):  # warm (captures on first step)
            logits = dec.step(out[:, n - 1:n]); n += 1
        dec.pos = None; logits = dec.prefill(prompt); n = 16
        torch.cuda.synchronize()
        host = 0.0
        t0 = time.perf_counter()
        for _ in range(N):
            h0 = time.perf_counter()
            logits = dec.step(out[:, n - 1:n])
            if mode == "full":
                out[:, n] = sample_next(logits, 0.0, None)
            elif mode == "sample_no_write":
                sample_next(logits, 0.0, None)
            n += 1
            host += time.perf_counter() - h0
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        print(f"{name} mega={mega} {mode:16s} wall {wall / N * 1e3:.4f} ms/token, host {host / N * 1e3:.4f} ms/token")
    # replay alone
    g = dec.graph
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(N):
        g.replay()
    torch.cuda.synchronize()
    print(f"{name} mega={mega} replay only      wall {(time.perf_counter() - t0) / N * 1e3:.4f} ms/token")

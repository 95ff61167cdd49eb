"""MLA's decoupled-RoPE key from its latent (fused_mla_rope's K_UP path, the model's default) alone, forward, at every
setting of fused_mla_rope.k_up_ladder() (or --settings) that fits this GPU and by k_up's matmul then the K kernel
(what serves wider latents, and where none fits): where is the kernel the faster?

    python -m scripts.bench_k_up --out_dir $OUT                                  # GPU, bf16, 12x1024, latents 128-512
    python -m scripts.bench_k_up --latents 512 --heads 16 --head_dim 128 --rope_dim 64
    python -m scripts.bench_k_up --settings 64x3,64x2,64x1,32x1,16x1        # the settings session 48 call 5 timed

Each row: the forward's GPU time a call (--calls calls captured in one CUDA graph, the median of --repeats replays,
divided by the calls), its bytes (the latent and k^R read, K written; the weights aside) over that time, and its max
|difference| from the matmul's K. The backward is the same for every row (the K kernel's backward, then k_up's two
products), so it is not timed.
"""

import argparse
import sys

if __name__ == "__main__" and not __package__:
    sys.exit("run from the repository root as a module: python -m scripts.bench_k_up ...")

import torch

import fused_mla_rope as fm
from model import rope_cache
from scripts.bench_decode_kernel import time_graph
from scripts.bench_train import fmt, markdown_table, parse_ints, parse_shapes, run_info, write_report


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="python -m scripts.bench_k_up --out_dir $OUT")
    p.add_argument("--shapes", default="12x1024", help="BxT, comma-separated")
    p.add_argument("--latents", default="128,256,512", help="the key latent's widths (kv_rank), comma-separated")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head_dim", type=int, default=64)
    p.add_argument("--rope_dim", type=int, default=32)
    p.add_argument("--settings", default=None,
                   help="the kernel's ROWSxSTAGES to time, comma-separated (default: fused_mla_rope.k_up_ladder(); "
                        "session 48 call 5's: 64x3,64x2,64x1,32x1,16x1); those beyond this GPU's shared memory skipped")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out_dir", default=None)
    p.add_argument("--name", default="bench_k_up")
    args = p.parse_args(argv)
    wanted = None
    if args.settings:
        wanted = []
        for item in args.settings.split(","):
            rows, _, stages = item.lower().partition("x")
            if not (rows.isdigit() and stages.isdigit()) or int(rows) < 16 or int(rows) & (int(rows) - 1) \
                    or int(stages) < 1:
                raise SystemExit(f"--settings: {item!r} is not ROWSxSTAGES (rows a power of two >= 16, stages >= 1; "
                                 f"e.g. 64x3)")
            wanted.append((int(rows), int(stages)))
    if not torch.cuda.is_available():
        raise SystemExit("No CUDA device: bench_k_up times the kernel on a GPU")
    fm.register_ops()
    device, dtype = torch.device("cuda"), torch.bfloat16
    import decode_attention as da
    limit = da.shared_memory(device)[0]
    nH, dH, dR = args.heads, args.head_dim, args.rope_dim
    info = run_info(args, device, sys.argv[1:] if argv is None else argv, module="scripts.bench_k_up")
    rows, payload = [], {"info": info, "limit": limit, "rows": []}
    real_launch = fm.k_up_launch
    try:
        for (B, T), dc in ((s, d) for s in parse_shapes(args.shapes) for d in parse_ints(args.latents, "latents")):
            g = torch.Generator(device="cpu").manual_seed(0)
            c_k = torch.randn(B, T, dc, generator=g).to(device, dtype)
            w = (torch.randn(nH * dH, dc, generator=g) / dc ** 0.5).to(device, dtype)
            k_rope = torch.randn(B, T, dR, generator=g).to(device, dtype)
            cos, sin = (t[:T].contiguous() for t in rope_cache(dR, T, 10000.0, device=device))
            size = torch.empty((), dtype=dtype).element_size()
            mb = B * T * size * (dc + dR + nH * (dH + dR)) / 1e6
            picked = real_launch(dc, dH, size, limit)
            settings = [s for s in (wanted or fm.k_up_ladder()) if fm.k_up_shared_bytes(*s, dc, dH, size) <= limit]
            settings.append(None)  # the matmul
            ref = None
            for setting in reversed(settings):  # the matmul first: the reference
                fm.k_up_launch = lambda *a, s=setting: s
                run = lambda: fm._K_UP(c_k, w, None, k_rope, cos, sin, nH)  # noqa: E731
                out = run()
                ref = out if ref is None else ref
                ms = time_graph(run, args.calls, args.repeats) / 1e3  # us -> ms a call
                name = "matmul + K kernel" if setting is None else f"kernel {setting[0]} rows, {setting[1]} stages"
                name += " (k_up_launch's)" if setting == picked else ""
                err = (out.float() - ref.float()).abs().max().item()
                r = dict(shape=f"{B}x{T}", latent=dc, setting=setting, picked=setting == picked, us=ms * 1e3,
                         tbs=mb / ms / 1e3, err=err)
                payload["rows"].append(r)
                rows.append([r["shape"], dc, name, fmt(r["us"], ".1f"), fmt(r["tbs"], ".2f"), fmt(err, ".3g")])
                print(rows[-1], flush=True)
    finally:
        fm.k_up_launch = real_launch
    md = (f"# MLA's key from its latent, forward alone\n\n{info['date']} on {info['gpu']}, torch {info['torch']}, "
          f"commit {info['git_commit']}, {dtype}, {nH} heads of {dH} + {dR}, {limit:,} B of shared memory a program\n\n"
          f"`{info['command']}`\n\n"
          + markdown_table(["shape", "latent", "row", "us", "TB/s", "max diff vs matmul"], rows) + "\n")
    write_report(args.out_dir, args.name, md, payload)
    print(md)


if __name__ == "__main__":
    main()

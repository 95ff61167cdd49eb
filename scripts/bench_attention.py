"""
Causal attention alone, forward and forward + backward, at the GPT-2 training shapes, for the score widths our
variants use: 64 (MHA, GQA, Tucker, learned-position MLA) and 96 (MLA's decoupled RoPE: 64 content + 32 rotated
columns, values 64 wide), and 128 (is 96 run as 128?). Each SDPA backend that takes the shapes, and torch.compile'd
flex_attention (Triton kernels generated for the exact head dims): how near the FLOP ratio (1.286x forward and
backward for 96/64 over 64/64) any kernel runs the wider scores, the question the limits table leaves for MLA's RoPE
cost.

    python -m scripts.bench_attention --out_dir $OUT                      # GPU, bf16, 12x1024 and 64x256, 12 heads
    python -m scripts.bench_attention --device cpu --shapes 2x64 --iters 2 # smoke test

Rows: shape, qk / v head dims, kernel; ms a call of the forward and of forward + backward (the gradients of q, k
and v returned, not accumulated; --iters calls captured in one CUDA graph, the median over --repeats replays; a
kernel that cannot be captured is timed eagerly, and says so), each x the first --dims' SDPA-auto row of the
same shape beside the FLOP ratio (the time at that row's efficiency), and the largest |difference| of the output from
SDPA's math backend (float32). A kernel that cannot take a shape is a row with its error.
"""

import argparse
import contextlib
import sys

if __name__ == "__main__" and not __package__:
    sys.exit("run from the repository root as a module: python -m scripts.bench_attention ...")

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from scripts.bench_decode_kernel import time_graph
from scripts.bench_gelu import timed
from scripts.bench_train import fmt, markdown_table, parse_shapes, run_info, short_error, write_report

BACKENDS = {"auto": None, "cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}
KERNELS = tuple(f"sdpa_{b}" for b in BACKENDS) + ("flex",)


def attention_fn(kernel: str, T: int, device):
    """kernel -> (fn(q, k, v) of causal attention with the default scale, the context to call it in). A forced SDPA
    backend is entered once around all of a row's calls: entering it per call costs more host time than a 64x256
    forward takes on the GPU."""
    if kernel == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        torch._dynamo.reset()  # each row compiles anew: the rows before would count against Dynamo's recompile limit
        mask = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, T, T, device=device)
        compiled = torch.compile(flex_attention, dynamic=False)
        return (lambda q, k, v: compiled(q, k, v, block_mask=mask)), contextlib.nullcontext()
    backend = BACKENDS[kernel.removeprefix("sdpa_")]
    context = contextlib.nullcontext() if backend is None else sdpa_kernel([backend])
    return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)), context


def flop_ratios(dims, base):
    """(forward, forward + backward) FLOPs of causal attention at head dims (qk, v) over those at base: the forward's
    products are QK^T (qk wide) and PV (v), the backward's S = QK^T recomputed, dP = dO V^T, dV = P^T dO, dQ = dS K
    and dK = dS^T Q, so qk + v and 3 qk + 2 v per score."""
    fwd = lambda qk, v: qk + v  # noqa: E731
    both = lambda qk, v: fwd(qk, v) + 3 * qk + 2 * v  # noqa: E731
    return fwd(*dims) / fwd(*base), both(*dims) / both(*base)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="12x1024,64x256", help="comma-separated BxT")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--dims", default="64/64,96/64", help="comma-separated qk/v head dims")
    p.add_argument("--kernels", default=",".join(KERNELS),
                   help=f"comma-separated, of {', '.join(KERNELS)} (sdpa_auto runs first: it is the base of the "
                        "ratios, which are left blank without it)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--graphs", action=argparse.BooleanOptionalAction, default=True,
                   help="time the calls replayed from a CUDA graph (default; no host time in them), else eagerly")
    p.add_argument("--device", default="cuda")
    p.add_argument("--out_dir", default=None)
    p.add_argument("--name", default="bench_attention")
    args = p.parse_args(argv)
    kernels = [k.strip() for k in args.kernels.split(",")]
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        raise SystemExit(f"--kernels: unknown {', '.join(unknown)}; allowed: {', '.join(KERNELS)}")
    kernels.sort(key=lambda k: k != "sdpa_auto")  # the base row first (stable: the others keep their order)
    dims = []
    for item in args.dims.split(","):
        try:
            dqk, dv = (int(x) for x in item.split("/"))
        except ValueError:
            raise SystemExit(f"--dims: {item!r} is not QK/V (e.g. 96/64)")
        if dqk < 1 or dv < 1:
            raise SystemExit(f"--dims: {item!r}: head dims must be >= 1")
        dims.append((dqk, dv))
    shapes = parse_shapes(args.shapes)
    for name, value in (("--heads", args.heads), ("--iters", args.iters), ("--repeats", args.repeats),
                        *((f"--shapes {b}x{t}", min(b, t)) for b, t in shapes)):
        if value < 1:
            raise SystemExit(f"{name} must be >= 1")
    try:
        device = torch.device(args.device)
    except RuntimeError:
        raise SystemExit(f"--device {args.device!r} is not a device; e.g. cuda, cuda:1, cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("No CUDA device: run with --device cpu --shapes 2x64 for a smoke test")
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    info = run_info(args, device, argv, module="scripts.bench_attention")
    rows, table = [], []
    for B, T in shapes:
        base = {}
        for dqk, dv in dims:
            g = torch.Generator(device="cpu").manual_seed(0)
            q, k, v = (torch.randn(B, args.heads, T, d, generator=g).to(device, dtype)
                       for d in (dqk, dqk, dv))
            with sdpa_kernel([SDPBackend.MATH]):  # the reference: float32, the math backend
                ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
            do = torch.randn(B, args.heads, T, dv, generator=g).to(device, dtype)
            for kernel in kernels:
                row = dict(shape=f"{B}x{T}", dqk=dqk, dv=dv, kernel=kernel, fwd_ms=None, fwd_bwd_ms=None, err=None,
                           error=None, graph_errors={})
                try:
                    fn, context = attention_fn(kernel, T, device)
                    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))

                    def fwd():
                        with torch.no_grad():
                            return fn(q, k, v)

                    def fwd_bwd():  # the gradients returned, not accumulated into .grad (no add kernels)
                        return torch.autograd.grad(fn(qg, kg, vg), (qg, kg, vg), do)
                    with context:
                        row["err"] = (fwd().float() - ref).abs().max().item()
                        for key, f in (("fwd_ms", fwd), ("fwd_bwd_ms", fwd_bwd)):
                            if cuda and args.graphs:
                                try:
                                    row[key] = time_graph(f, args.iters, args.repeats) / 1e3  # us -> ms
                                    continue
                                except Exception as e:  # a kernel that cannot be captured: timed eagerly
                                    torch.cuda.synchronize()
                                    row["graph_errors"][key] = short_error(e)
                            row[key] = timed(f, args.iters, args.repeats, cuda)
                except Exception as e:  # one kernel failing on a shape leaves the others
                    row["error"] = short_error(e)
                if kernel == "sdpa_auto" and (dqk, dv) == dims[0] and row["error"] is None:
                    base = row
                for key in ("fwd_ms", "fwd_bwd_ms"):
                    row[key + "_vs_base"] = (row[key] / base[key] if base.get(key) and row[key] else None)
                row["flops_fwd_vs_base"], row["flops_fwd_bwd_vs_base"] = flop_ratios((dqk, dv), dims[0])
                rows.append(row)
                table.append([row["shape"], f"{dqk}/{dv}", kernel, fmt(row["fwd_ms"], ".4f"),
                              fmt(row["fwd_ms_vs_base"], ".3f"), f"{row['flops_fwd_vs_base']:.3f}",
                              fmt(row["fwd_bwd_ms"], ".4f"), fmt(row["fwd_bwd_ms_vs_base"], ".3f"),
                              f"{row['flops_fwd_bwd_vs_base']:.3f}", fmt(row["err"], ".1e"),
                              row["error"] or "; ".join(f"{key} timed eagerly: {e}" for key, e in row["graph_errors"].items())])
                print(" ".join(str(c) for c in table[-1]), flush=True)
                md = (f"# Causal attention alone ({args.heads} heads, {dtype}, {info.get('gpu') or args.device})\n\n"
                      f"`{info['command']}`\n\n"
                      + markdown_table(["shape", "qk/v", "kernel", "fwd ms", "x base", "FLOPs x base", "fwd+bwd ms",
                                        "x base", "FLOPs x base", "max err vs math", "note"], table)
                      + f"\n\nbase: sdpa_auto at {dims[0][0]}/{dims[0][1]} of the same shape. FLOPs x base: "
                      "the products' FLOPs over the base's (forward QK^T and PV: dqk + dv; backward S recomputed, dP, "
                      "dV, dQ, dK: 3 dqk + 2 dv), the time a kernel as efficient as the base's would take.\n")
                write_report(args.out_dir, args.name, md, dict(info, rows=rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

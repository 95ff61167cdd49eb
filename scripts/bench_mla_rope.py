"""
MLA's decoupled-RoPE query and key alone (fused_mla_rope.decoupled_qk), forward and backward, at GPT-2 MLA's training
shapes: inductor's compiled torch form (what the step ran before) against the Triton kernels at each --rows x --warps,
with a copy of the same bytes as the floor.

    python -m scripts.bench_mla_rope --out_dir $OUT                    # GPU, bf16, 12x1024 and 64x256, 12 heads 64 + 32
    python -m scripts.bench_mla_rope --device cpu --shapes 2x64         # smoke test (torch rows only)

Rows, per layer, the GPU time of a pass's kernels (torch.profiler over --calls calls, their kernels' durations summed
and divided by the calls: the passes are short enough that timing them from the host measures Python's launches, not
the GPU; the copy row is event-timed, scripts.bench_gelu's timing):

    copy          one read and one write of the pass's bytes (forward: q, k, k^R in, Q, K out; backward: dQ, dK in,
                  dq, dk, dk^R out): its floor
    inductor      torch.compile of decoupled_qk_torch, its forward / its backward (autograd through the compiled
                  function, the incoming gradient of Q transposed as SDPA's)
    kernels       fused_mla_rope's forward / backward kernel at ROWS tokens a program, NUM_WARPS warps

Each kernel row's outputs are compared with the compiled torch form (max |difference|).
"""

import argparse
import itertools
import sys

if __name__ == "__main__" and not __package__:
    sys.exit("run from the repository root as a module: python -m scripts.bench_mla_rope ...")

import torch

import fused_mla_rope as fm
from model import rope_cache
from scripts.bench_gelu import timed
from scripts.bench_train import (Clock, fmt, markdown_table, parse_ints, parse_shapes, profile_iterations,
                                 run_info, write_report)


def make_inputs(B, T, nH, dH, dR, dtype, device):
    """The step's layouts: q (B, T, nH, dH + dR) from one matmul; k (B, T, nH, dH) dense, its own matmul's output
    (session 26: k and v by two matmuls); k^R with those of a column slice of the stacked down-projection's output (dcQ + dcK + dR wide, here 2 x
    128 + dR); gradients: dQ transposed from SDPA's (B, nH, T, D), dK too."""
    g = torch.Generator(device=device).manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=g, device=device, dtype=dtype)

    def strided_leaf(shape, strides):  # a leaf with the step's strides: its gradient lands as it comes (no scatter
        x = torch.empty_strided(shape, strides, device=device, dtype=dtype)  # into a wider tensor, which the
        return x.copy_(rnd(*shape)).requires_grad_()  # backward's time would count)
    q = rnd(B, T, nH, dH + dR).requires_grad_()
    k = strided_leaf((B, T, nH, dH), (T * nH * dH, nH * dH, dH, 1))
    k_rope = strided_leaf((B, T, dR), (T * (256 + dR), 256 + dR, 1))
    cos, sin = (t[:T].contiguous() for t in rope_cache(dR, T, 10000.0, device=device))
    gq = rnd(B, nH, T, dH + dR).transpose(1, 2)
    gk = rnd(B, nH, T, dH + dR).transpose(1, 2)
    return (q, k, k_rope), (q, k, k_rope), cos, sin, (gq, gk)


def device_ms(fn, calls: int, device: torch.device) -> float:
    """ms of device kernels a call of fn: bench_train's profile of `calls` calls (after one discarded), its kernels'
    durations summed, divided by calls (the CPU operators' self times on the CPU)."""
    for _ in range(3):
        fn()
    pairs, _ = profile_iterations(lambda i: fn(), calls, device, Clock(device))
    return sum(us for _, us in pairs) / 1e3 / calls


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="12x1024,64x256")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head_dim", type=int, default=64)
    p.add_argument("--rope_dim", type=int, default=32)
    p.add_argument("--rows", default="2,4,8,16", help="fused_mla_rope.ROWS settings (comma-separated)")
    p.add_argument("--warps", default="2,4,8", help="fused_mla_rope.NUM_WARPS settings")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out_dir", default=None)
    p.add_argument("--name", default="bench_mla_rope")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():  # torch's "not compiled with CUDA" traceback came later
        raise SystemExit("No CUDA device: run with --device cpu --shapes 2x16 --calls 1 --repeats 1 for a smoke test")
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    nH, dH, dR = args.heads, args.head_dim, args.rope_dim
    info = run_info(args, device, argv, module="scripts.bench_mla_rope")
    rows, payload = [], {"info": info, "rows": []}
    compiled = torch.compile(fm.decoupled_qk_torch) if cuda else fm.decoupled_qk_torch

    def add(shape, name, fwd_ms, bwd_ms, fwd_mb, bwd_mb, err=None):
        r = dict(shape=shape, name=name, fwd_ms=fwd_ms, bwd_ms=bwd_ms, err=err,
                 fwd_tbs=fwd_mb / fwd_ms / 1e3 if fwd_ms else None, bwd_tbs=bwd_mb / bwd_ms / 1e3 if bwd_ms else None)
        payload["rows"].append(r)
        rows.append([shape, name, fmt(fwd_ms and fwd_ms * 1e3, ".1f"), fmt(r["fwd_tbs"], ".2f"),
                     fmt(bwd_ms and bwd_ms * 1e3, ".1f"), fmt(r["bwd_tbs"], ".2f"), fmt(err, ".3g")])
        md = (f"# MLA decoupled RoPE: query and key alone\n\n{info['date']} on {info['gpu'] or info['device']}, "
              f"torch {info['torch']}, commit {info['git_commit']}, {dtype}, {nH} heads of {dH} + {dR}\n\n"
              f"`{info['command']}`\n\n"
              + markdown_table(["shape", "row", "fwd us", "fwd TB/s", "bwd us", "bwd TB/s", "max diff vs inductor"],
                               rows) + "\n")
        write_report(args.out_dir, args.name, md, payload)
        print(rows[-1], flush=True)

    for B, T in parse_shapes(args.shapes):
        shape = f"{B}x{T}"
        ins, leaves, cos, sin, (gq, gk) = make_inputs(B, T, nH, dH, dR, dtype, device)
        e = torch.empty((), dtype=dtype).element_size()
        tok = B * T
        fwd_mb = tok * e * (nH * (dH + dR) + nH * dH + dR + 2 * nH * (dH + dR)) / 1e6  # in + out
        bwd_mb = tok * e * (2 * nH * (dH + dR) + nH * (dH + dR) + nH * dH + dR) / 1e6
        src = torch.empty(int(fwd_mb * 1e6 / 2 / e), device=device, dtype=dtype)
        dst = torch.empty_like(src)
        copy_ms = timed(lambda: dst.copy_(src), args.calls, args.repeats, cuda)
        add(shape, "copy (the forward's bytes, half in, half out)", copy_ms, copy_ms * bwd_mb / fwd_mb, fwd_mb, bwd_mb)

        def fwd_bwd(fn):
            def f():
                return fn(*ins, cos, sin)
            Q, K = f()
            def b():  # the forward again (a compiled backward runs once a graph), then the backward
                for x in leaves:
                    x.grad = None
                torch.autograd.backward(list(f()), [gq, gk])
            return f, b, (Q, K)

        def both(f, b):
            """(forward ms, backward ms) of GPU time: the backward's is forward + backward less the forward."""
            t_f = device_ms(f, args.calls, device)
            return t_f, device_ms(b, args.calls, device) - t_f
        f, b, ref = fwd_bwd(compiled)
        b()
        ref_grads = [x.grad.clone() for x in leaves]
        add(shape, "inductor (torch form, compiled)", *both(f, b), fwd_mb, bwd_mb)
        if not cuda:
            continue
        for rows_, warps in itertools.product(parse_ints(args.rows, "rows"), parse_ints(args.warps, "warps")):
            fm.ROWS, fm.NUM_WARPS = rows_, warps
            f, b, out = fwd_bwd(lambda *a: fm.decoupled_qk(*a, backend="triton"))
            b()
            err = max([(o.float() - r.float()).abs().max().item() for o, r in zip(out, ref)]
                      + [(x.grad.float() - r.float()).abs().max().item() for x, r in zip(leaves, ref_grads)])
            add(shape, f"kernels ROWS={rows_} NUM_WARPS={warps}", *both(f, b), fwd_mb, bwd_mb, err)


if __name__ == "__main__":
    main()

"""
GPT-2's MLP activation alone: exact GELU (erf) forward and backward on the (tokens, 4 d) pre-activations of a
training step, inductor's compiled kernels against Triton kernels of the same formula, and the copy rate as the floor.

    python -m scripts.bench_gelu --out_dir $OUT                    # GPU, bf16, GPT-2's 12x1024 and 64x256 steps
    python -m scripts.bench_gelu --device cpu --shapes 256x512     # smoke test (torch rows only)

The training step's profile (results/bench/session12/train_graph_step.md) has inductor's GELU forward at 59 us and
its backward at 80 us a layer at 12,288 x 3,072 bf16: 2.5 and 2.8 TB/s for 151 and 226 MB, against the ~4.2 TB/s a
copy reaches. This script asks why: memory (then a copy is as slow) or the erf's arithmetic (then a kernel doing less
of it is faster). Rows, median over --repeats of the mean of --calls back-to-back calls between two CUDA events:

    copy            y.copy_(x): one read and one write, the forward's floor
    add             torch.add(g, x, out=y): two reads and one write, the backward's floor
    inductor_fwd    torch.compile(F.gelu)(x), exact (erf)           inductor_bwd   aten.gelu_backward(g, x), compiled
    inductor_tanh   torch.compile(F.gelu(x, approximate='tanh')): a cheaper formula, to see what arithmetic costs
    triton_fwd/bwd  one Triton kernel per pass, erf from libdevice (inductor's formula), at each --blocks x --warps
    *_sigmoid       x * sigmoid(1.702 x) in Triton: one exp, no erf (not GELU: only a measure of the erf's cost)
    fused_gelu_*    fused_gelu's kernels (what model.MLP runs on CUDA: Phi through erfcx, one exp2), each setting

Each Triton row's result is compared with F.gelu / aten.gelu_backward in float64 (max |error| in units of the
output's bf16 spacing) and with inductor's bf16 output (fraction of elements that differ).
"""

import argparse
import itertools
import statistics
import sys

if __name__ == "__main__" and not __package__:
    sys.exit("run from the repository root as a module: python -m scripts.bench_gelu ...")

import torch
import torch.nn.functional as F

import fused_gelu as fg
from scripts.bench_train import fmt, markdown_table, parse_ints, parse_shapes, run_info, write_report

try:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
    HAVE_TRITON = True
except ImportError:  # the CPU smoke test
    HAVE_TRITON = False

if HAVE_TRITON:
    @triton.jit
    def _gelu_fwd(X, Y, n, BLOCK: tl.constexpr, SIGMOID: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        if SIGMOID:
            y = x / (1.0 + tl.exp2(-1.702 * 1.4426950408889634 * x))
        else:
            y = 0.5 * x * (1.0 + libdevice.erf(x * 0.7071067811865476))
        tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)

    @triton.jit
    def _gelu_bwd(G, X, DX, n, BLOCK: tl.constexpr, SIGMOID: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
        if SIGMOID:
            s = 1.0 / (1.0 + tl.exp2(-1.702 * 1.4426950408889634 * x))
            d = s + 1.702 * x * s * (1.0 - s)
        else:
            cdf = 0.5 * (1.0 + libdevice.erf(x * 0.7071067811865476))
            pdf = 0.3989422804014327 * tl.exp2(-0.5 * 1.4426950408889634 * x * x)
            d = cdf + x * pdf
        tl.store(DX + offs, (g * d).to(DX.dtype.element_ty), mask=mask)


def timed(fn, calls: int, repeats: int, cuda: bool) -> float:
    """ms per call: the median over `repeats` of the mean over `calls` back-to-back calls."""
    import time
    for _ in range(3):
        fn()
    out = []
    for _ in range(repeats):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(calls):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / calls)
        else:
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - t) * 1e3 / calls)
    return statistics.median(out)


def bf16_spacing(t: torch.Tensor) -> torch.Tensor:
    """The distance to the next bf16 value above |t| (float64): the unit errors are counted in."""
    a = t.abs().to(torch.float64).clamp_min(2.0 ** -126)
    return torch.exp2(torch.floor(torch.log2(a)) - 7)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="12288x3072,16384x3072", help="pre-activation shapes, tokens x hidden")
    p.add_argument("--blocks", default="1024,2048,4096")
    p.add_argument("--warps", default="4,8")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out_dir", default="")
    p.add_argument("--name", default="bench_gelu")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():  # torch's "not compiled with CUDA" traceback came later
        raise SystemExit("No CUDA device: run with --device cpu --shapes 64x32 --calls 1 --repeats 1 for a smoke test")
    cuda = device.type == "cuda"
    info = run_info(args, device, argv, "scripts.bench_gelu")
    gen = torch.Generator(device=device).manual_seed(0)
    dtype = torch.bfloat16 if cuda else torch.float32
    rows = []
    for M, N in parse_shapes(args.shapes):
        x = torch.randn(M, N, device=device, generator=gen).to(dtype)  # pre-activations ~ N(0, 1)
        g = (0.01 * torch.randn(M, N, device=device, generator=gen)).to(dtype)
        y = torch.empty_like(x)
        nbytes = x.numel() * x.element_size()
        xd = x.double()
        cdf = 0.5 * torch.special.erfc(-xd / 2 ** 0.5)  # Phi, accurate in the negative tail (1 + erf is not)
        ref_fwd = xd * cdf
        ref_bwd = g.double() * (cdf + xd * torch.exp(-0.5 * xd * xd) / (2 * torch.pi) ** 0.5)
        del xd, cdf
        inductor = {}

        def add(name, ms, moved, out=None, ref=None, versus=None, **kw):
            row = dict(shape=f"{M}x{N}", row=name, ms=ms, tbps=moved / ms / 1e9, **kw)
            if out is not None:
                row["max_err_spacings"] = ((out.double() - ref).abs() / bf16_spacing(ref)).max().item()
                if versus is not None:
                    row["differ_from_inductor"] = (out != versus).double().mean().item()
            rows.append(row)
            print(f"{M}x{N} {name:<36} {ms * 1e3:8.1f} us  {row['tbps']:5.2f} TB/s"
                  + (f"  err {row['max_err_spacings']:.2f} sp" if "max_err_spacings" in row else "")
                  + (f"  differs {row['differ_from_inductor']:.2e}" if "differ_from_inductor" in row else ""),
                  flush=True)

        add("copy", timed(lambda: y.copy_(x), args.calls, args.repeats, cuda), 2 * nbytes)
        add("add", timed(lambda: torch.add(g, x, out=y), args.calls, args.repeats, cuda), 3 * nbytes)
        fwd = torch.compile(lambda t: F.gelu(t)) if cuda else (lambda t: F.gelu(t))
        bwd = (torch.compile(lambda a, t: torch.ops.aten.gelu_backward(a, t)) if cuda
               else (lambda a, t: torch.ops.aten.gelu_backward(a, t)))
        tanh = (torch.compile(lambda t: F.gelu(t, approximate="tanh")) if cuda
                else (lambda t: F.gelu(t, approximate="tanh")))
        inductor["fwd"], inductor["bwd"] = fwd(x), bwd(g, x)
        add("inductor_fwd", timed(lambda: fwd(x), args.calls, args.repeats, cuda), 2 * nbytes, inductor["fwd"], ref_fwd)
        add("inductor_bwd", timed(lambda: bwd(g, x), args.calls, args.repeats, cuda), 3 * nbytes, inductor["bwd"],
            ref_bwd)
        add("inductor_tanh (not exact)", timed(lambda: tanh(x), args.calls, args.repeats, cuda), 2 * nbytes,
            tanh(x), ref_fwd)
        if not (cuda and HAVE_TRITON):
            continue
        n = x.numel()
        for block, warps in itertools.product(parse_ints(args.blocks, "blocks"), parse_ints(args.warps, "warps")):
            grid = (triton.cdiv(n, block),)
            dx = torch.empty_like(x)
            tag = f"BLOCK={block} warps={warps}" + (" (module default)" if (block, warps) == (fg.BLOCK, fg.NUM_WARPS)
                                                    else "")
            f = lambda: fg._gelu_fwd_kernel[grid](x, y, n, BLOCK=block, num_warps=warps)  # noqa: E731
            b = lambda: fg._gelu_bwd_kernel[grid](g, x, dx, n, BLOCK=block, num_warps=warps)  # noqa: E731
            add(f"fused_gelu_fwd {tag}", timed(f, args.calls, args.repeats, cuda), 2 * nbytes, y.clone(), ref_fwd,
                inductor["fwd"], block=block, warps=warps)
            add(f"fused_gelu_bwd {tag}", timed(b, args.calls, args.repeats, cuda), 3 * nbytes, dx.clone(), ref_bwd,
                inductor["bwd"], block=block, warps=warps)
        for block, warps, sigmoid in itertools.product(parse_ints(args.blocks, "blocks"),
                                                       parse_ints(args.warps, "warps"), (False, True)):
            grid = (triton.cdiv(n, block),)
            dx = torch.empty_like(x)
            tag = f"BLOCK={block} warps={warps}" + (" sigmoid (not GELU)" if sigmoid else "")
            f = lambda: _gelu_fwd[grid](x, y, n, BLOCK=block, SIGMOID=sigmoid, num_warps=warps)  # noqa: E731
            b = lambda: _gelu_bwd[grid](g, x, dx, n, BLOCK=block, SIGMOID=sigmoid, num_warps=warps)  # noqa: E731
            ms = timed(f, args.calls, args.repeats, cuda)
            add(f"triton_fwd {tag}", ms, 2 * nbytes, y.clone(), ref_fwd, None if sigmoid else inductor["fwd"],
                block=block, warps=warps)
            ms = timed(b, args.calls, args.repeats, cuda)
            add(f"triton_bwd {tag}", ms, 3 * nbytes, dx.clone(), ref_bwd, None if sigmoid else inductor["bwd"],
                block=block, warps=warps)
    md = ["# GELU alone: inductor's kernels, Triton's, and the copy rate\n",
          f"{info['date']} on {info['gpu']}, torch {info['torch']}\n", f"`{info['command']}`\n",
          "TB/s counts the bytes a pass must move (forward: x read, y written; backward: g and x read, dx written). "
          "err: the largest |error| against float64 (Phi as erfc(-x / sqrt 2) / 2), in bf16 spacings of the exact value; differs: the fraction "
          "of elements whose bf16 value differs from inductor's.\n",
          markdown_table(["shape", "row", "us", "TB/s", "max err (bf16 spacings)", "differs from inductor"],
                         [[r["shape"], r["row"], fmt(r["ms"] * 1e3, ".1f"), fmt(r["tbps"], ".2f"),
                           fmt(r.get("max_err_spacings"), ".2f"), fmt(r.get("differ_from_inductor"), ".1e")]
                          for r in rows])]
    write_report(args.out_dir, args.name, "\n".join(md), {**info, "rows": rows})


if __name__ == "__main__":
    main()

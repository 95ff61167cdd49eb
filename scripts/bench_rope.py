"""
What RoPE costs in the compiled training step of an MHA layer, per way of writing it.

    python -m scripts.bench_rope --out_dir $OUT                 # GPU: GPT-2 124M's attention at 12x1024 and 64x256
    python -m scripts.bench_rope --device cpu --tiny            # smoke test: every formulation, eager, seconds

bench_train finds MHA's RoPE costing 11-12% of the GPT-2 step, all of it in the backward, while
Tucker's latent RoPE costs 2%. This isolates one attention sublayer as train.py runs it (bf16
autocast, torch.compile, the SDPA backend PyTorch picks): x (B, T, d) -> c_attn -> RoPE on q and k
-> SDPA (causal) -> c_proj, forward and backward (x requires grad, as inside the model), for each
formulation below, and reports the median forward+backward time, its cost over the sublayer
without RoPE, and the profile's top kernels. With --profile on a GPU the cost is taken on the
kernels' time per step (a sublayer alone is host-bound: its wall time varies by as much as RoPE
costs between identical rows), else on the wall time. Every formulation computes the same function: the
CPU test checks each against the model's `apply_rope` in float64, values and gradients.

    none       no RoPE (the reference)
    model      model.py as it is: the layer's own forward (GroupedQueryAttention), which rotates q and k in one
               call on the (B, T, nH + nG, dH) view of c_attn's first columns (since 2026-11-26; the 'joint'
               row of results/bench/session5/bench_rope.json)
    separate   q and k rotated by two apply_rope calls before the head transpose (model.py before that change,
               the earlier runs' 'model' row)
    after      q and k rotated after the head transpose, in SDPA's (B, heads, T, dH) layout
    halfsign   model.apply_rope_wide: x [cos | cos] + [x2 | x1] [-sin | sin] with full-width tables (the decode
               step's form; HF LLaMA's rotate-half form)
    function   an autograd.Function whose backward is the inverse rotation (g by -angle)
    contig_v   as separate, with v made contiguous (tests whether v's layout costs the backward)
    three_proj q, k, v from three matmuls on c_attn's weight slices: no (B, T, 3d) gradient to assemble
    none_split3, none_unbind, none_t   without RoPE, q, k, v cut out of c_attn's output by one split of its
               (B, T, 3 nH, dH) view, by unbinding its (B, T, 3, nH, dH) view, or by one transpose then a split
               over heads (the 'none' row slices q and k out of one block: inductor assembles the gradient of
               c_attn's output from two slice_backward's and a cat, GPT-2: 1.1 ms of a 25 ms step)

--cat concat (repeatable as --cat pointwise,concat) lowers every torch.cat through inductor's ConcatKernel
(producers write into their slice of the output) instead of one pointwise kernel that evaluates every
input, masked, for each output element: the form inductor picks for RoPE's backward, whose gradient of
c_attn's output is cat(rotated dq, rotated dk, dv).

--dump_kernels DIR copies the Triton source of every compiled kernel whose name shows RoPE's ops
(cat, neg, slice) into DIR, to read what inductor made of each formulation.
"""

import argparse
import glob
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:
    sys.exit("run from the repository root as a module: python -m scripts.bench_rope ...")

import torch
import torch.nn as nn
import torch.nn.functional as F

from model import GPTConfig, GroupedQueryAttention, apply_rope, apply_rope_wide, rope_cache, wide_rope_rows
from scripts.bench_train import (Clock, command_line, fmt, kernel_table, markdown_table, profile_iterations,
                                 run_info, write_report)


class RopeFunction(torch.autograd.Function):
    """apply_rope with the inverse rotation as its backward: d/dx R x = R^T g = R(-angle) g."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return apply_rope(x, cos, sin)

    @staticmethod
    def backward(ctx, g):
        cos, sin = ctx.saved_tensors
        return apply_rope(g, cos, -sin), None, None


FORMULATIONS = ("none", "model", "separate", "after", "halfsign", "function", "contig_v", "three_proj",
                "none_split3", "none_unbind", "none_t")
NO_ROPE = ("none", "none_split3", "none_unbind", "none_t")  # the sublayer without RoPE, written in four ways
CAT_LOWERINGS = ("pointwise", "concat")  # inductor's choice (pointwise for few simple inputs) / always ConcatKernel


def cat_lowering(kind: str) -> dict:
    """The inductor config values for --cat: {} keeps inductor's defaults; 'concat' turns the pointwise form off."""
    if kind not in CAT_LOWERINGS:
        raise ValueError(f"cat={kind!r}: allowed {CAT_LOWERINGS}")
    if kind == "pointwise":
        return {}
    import torch._inductor.config as inductor_config
    return {k: 0 for k in ("max_pointwise_cat_inputs", "max_complex_pointwise_cat_inputs") if hasattr(inductor_config, k)}


class AttentionLayer(nn.Module):
    """GPT-2's attention sublayer with one RoPE formulation. `model` runs GroupedQueryAttention.forward
    itself; the others use its weights (c_attn, c_proj) with their own q/k rotation."""

    def __init__(self, config: GPTConfig, formulation: str):
        super().__init__()
        if formulation not in FORMULATIONS:
            raise ValueError(f"formulation={formulation!r}: allowed {FORMULATIONS}")
        self.formulation = formulation
        self.attn = GroupedQueryAttention(config)
        self.attn.rope = formulation not in NO_ROPE
        cos, sin = rope_cache(config.head_dim, config.block_size, config.rope_theta)
        self.register_buffer("cos", cos, persistent=False)  # (block, dH/2)
        self.register_buffer("sin", sin, persistent=False)
        cos2, sin2 = wide_rope_rows(cos, sin)
        self.register_buffer("cos2", cos2, persistent=False)  # (block, dH): [cos | cos]
        self.register_buffer("sin2", sin2, persistent=False)  # [-sin | sin]

    def forward(self, x):
        a, f = self.attn, self.formulation
        if f in ("none", "model"):
            return a(x, (self.cos, self.sin))
        B, T, d = x.size()
        nH, dH = a.n_head, a.head_dim
        if f in NO_ROPE:  # how q, k, v are cut out of c_attn's output decides how inductor assembles its gradient
            qkv = a.c_attn(x)  # (B, T, 3d)
            if f == "none_split3":  # one split of the (B, T, 3 nH, dH) view: the gradient is one cat
                q, k, v = (t.transpose(1, 2) for t in qkv.view(B, T, 3 * nH, dH).split(nH, dim=2))
            elif f == "none_unbind":  # (B, T, 3, nH, dH) unbound: the gradient is one stack
                q, k, v = (t.transpose(1, 2) for t in qkv.view(B, T, 3, nH, dH).unbind(2))
            else:  # none_t: one transpose to (B, 3 nH, T, dH), then a split over heads
                q, k, v = qkv.view(B, T, 3 * nH, dH).transpose(1, 2).split(nH, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nH, T, dH)
            return a.c_proj(y.transpose(1, 2).reshape(B, T, d))
        cos, sin = self.cos[:T, None], self.sin[:T, None]  # (T, 1, dH/2)
        if f == "three_proj":  # the same weights, three GEMMs: q, k, v are separate tensors with separate gradients
            W, bias = a.c_attn.weight, a.c_attn.bias
            q, k, v = (F.linear(x, W[i * d:(i + 1) * d], None if bias is None else bias[i * d:(i + 1) * d])
                       .view(B, T, nH, dH) for i in range(3))
            q, k = apply_rope(q, cos, sin).transpose(1, 2), apply_rope(k, cos, sin).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True)  # (B, nH, T, dH)
            return a.c_proj(y.transpose(1, 2).reshape(B, T, d))
        qkv = a.c_attn(x)  # (B, T, 3d)
        q, k = qkv[..., :d].view(B, T, nH, dH), qkv[..., d:2 * d].view(B, T, nH, dH)
        if f == "after":
            q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, nH, T, dH)
            q, k = apply_rope(q, cos[:, 0], sin[:, 0]), apply_rope(k, cos[:, 0], sin[:, 0])
        else:
            if f in ("separate", "contig_v"):
                q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            elif f == "halfsign":
                c2, s2 = self.cos2[:T, None].to(q.dtype), self.sin2[:T, None].to(q.dtype)
                q, k = apply_rope_wide(q, c2, s2), apply_rope_wide(k, c2, s2)
            elif f == "function":
                q, k = RopeFunction.apply(q, cos, sin), RopeFunction.apply(k, cos, sin)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = qkv[..., 2 * d:].view(B, T, nH, dH)
        if f == "contig_v":
            v = v.contiguous()
        v = v.transpose(1, 2)  # (B, nH, T, dH)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nH, T, dH)
        return a.c_proj(y.transpose(1, 2).reshape(B, T, d))


def layer_config(tiny: bool, block_size: int) -> GPTConfig:
    if tiny:
        return GPTConfig(n_layer=1, n_head=4, n_embd=32, block_size=block_size, vocab_size=64, bias=False, pos_emb="rope")
    return GPTConfig(n_layer=1, n_head=12, n_embd=768, block_size=block_size, vocab_size=50304, bias=False,
                     pos_emb="rope")


def bench_formulation(formulation, config, B, T, args, device, clock, cat: str = "pointwise"):
    torch.manual_seed(0)
    torch._dynamo.reset()  # one compile per row: no recompile limit reached, no graph shared between rows
    layer = AttentionLayer(config, formulation).to(device)
    step_fn = torch.compile(layer, options=cat_lowering(cat) or None) if args.compile else layer
    x = torch.randn(B, T, config.n_embd, device=device, requires_grad=True)
    g = torch.randn(B, T, config.n_embd, device=device)
    amp = torch.autocast(device.type, dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)

    def step(_=None):
        with amp:
            y = step_fn(x)
        y.backward(g)

    t0 = time.perf_counter()
    step()
    clock.sync()
    first_s = time.perf_counter() - t0
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.iters):
        a = clock.stamp()
        step()
        b = clock.stamp()
        clock.sync()
        times.append(clock.ms(a, b))
    row = dict(formulation=formulation, cat=cat, batch=B, seq_len=T, ms=statistics.median(times), first_step_s=first_s)
    if args.profile:
        pairs, source = profile_iterations(step, 3, device, clock)
        row["profile"] = {**kernel_table(pairs, 3, row["ms"], top=8), "source": source}
    return row


def cost(row: dict) -> float:
    """What a row costs: its kernels' time per step when profiled (the GPU's work: one sublayer is ~25
    kernels, and its wall time moves with the host by as much as RoPE costs), else its wall time."""
    profile = row.get("profile") or {}
    return profile.get("kernel_ms_per_step") if profile.get("source") == "cuda" else row["ms"]


def dump_kernels(cache_dir: str, out_dir: Path) -> int:
    """Copy the Triton sources inductor wrote whose kernel names show RoPE's ops into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    for path in glob.glob(os.path.join(cache_dir, "**", "*.py"), recursive=True):
        text = Path(path).read_text(errors="replace")
        if "@triton.jit" in text and ("cat" in text and "neg" in text):
            shutil.copy(path, out_dir / Path(path).name)
            n += 1
    return n


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--formulations", default=",".join(FORMULATIONS), help="comma-separated of " + ", ".join(FORMULATIONS))
    p.add_argument("--shapes", default="12x1024,64x256", help="comma-separated BxT")
    p.add_argument("--cat", default="pointwise", help="comma-separated of " + ", ".join(CAT_LOWERINGS)
                   + ": how inductor lowers torch.cat (each formulation runs once per value)")
    p.add_argument("--device", default="cuda", help="cuda (default), or cpu with --tiny for a smoke test")
    p.add_argument("--tiny", action="store_true", help="a 32-wide layer (CPU smoke test)")
    p.add_argument("--compile", type=lambda s: s.lower() in ("1", "true", "yes"), default=None,
                   help="torch.compile the layer (default: on CUDA)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--profile", action="store_true", help="the top kernels of each row")
    p.add_argument("--dump_kernels", default=None, metavar="DIR")
    p.add_argument("--out_dir", default=None)
    p.add_argument("--name", default="bench_rope")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():  # was: full-size rows on the CPU, silent for minutes
        raise SystemExit("no CUDA device: run with --device cpu --tiny for a smoke test")
    if args.compile is None:
        args.compile = device.type == "cuda"
    forms = [f.strip() for f in args.formulations.split(",") if f.strip()]
    bad = [f for f in forms if f not in FORMULATIONS]
    if bad:
        raise SystemExit(f"--formulations: unknown {bad}; allowed {', '.join(FORMULATIONS)}")
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",")]
    if args.tiny:
        shapes = [(2, 16)]
    info = run_info(args, device, argv, module="scripts.bench_rope")
    clock = Clock(device)
    rows = []
    cats = [c.strip() for c in args.cat.split(",") if c.strip()]
    if not cats or any(c not in CAT_LOWERINGS for c in cats):
        raise SystemExit(f"--cat {args.cat}: allowed a comma-separated list of {', '.join(CAT_LOWERINGS)}")
    for B, T in shapes:
        config = layer_config(args.tiny, max(T, 16))
        for cat in cats:
            for f in forms:
                try:
                    row = bench_formulation(f, config, B, T, args, device, clock, cat)
                except Exception as e:  # one formulation failing (a backend, a compile error) leaves the others
                    row = dict(formulation=f, cat=cat, batch=B, seq_len=T, ms=None, error=f"{type(e).__name__}: {e}"[:300])
                rows.append(row)
                print(f"[{B}x{T} cat={cat}] {f:10s} {fmt(row['ms'], '.3f')} ms"
                      + (f"  {row['error']}" if row.get("error") else ""), flush=True)
            same = lambda r: (r["batch"], r["seq_len"], r["cat"]) == (B, T, cat)  # noqa: E731
            ref = next((r for r in rows if r["formulation"] == "none" and same(r)), None)
            for r in rows:
                if same(r) and ref and r["ms"] and ref["ms"]:
                    r["rope_cost_pct"] = 100 * (cost(r) / cost(ref) - 1)
    table = markdown_table(
        ["shape", "cat", "formulation", "fwd+bwd ms (wall)", "kernel ms", "RoPE cost %", "kernels / step",
         "top kernel (ms)", "note"],
        [[f"{r['batch']}x{r['seq_len']}", r["cat"], r["formulation"], fmt(r["ms"], ".3f"),
          fmt(r.get("profile", {}).get("kernel_ms_per_step"), ".3f"),
          fmt(r.get("rope_cost_pct"), "+.1f"), fmt(r.get("profile", {}).get("calls_per_step"), ".0f"),
          (lambda t: f"`{t['name'][:70]}` ({t['ms']:.3f})" if t else "—")(
              next(iter(r.get("profile", {}).get("top", [])), None)), r.get("error", "")] for r in rows])
    md = (f"# RoPE formulations: one MHA attention sublayer, forward + backward\n\n{info['date']} on {info['device']}, "
          f"torch {info['torch']}, compile={args.compile}, bf16 autocast on CUDA; median of {args.iters} after "
          f"{args.warmup} warm-up.\n\n`{command_line(argv, 'scripts.bench_rope')}`\n\n{table}\n")
    for r in rows:
        if r.get("profile"):
            md += (f"\n{r['batch']}x{r['seq_len']} cat={r['cat']} {r['formulation']}: "
                   + "; ".join(f"`{t['name'][:60]}` {t['calls']:.0f}x {t['ms']:.3f} ms" for t in r["profile"]["top"]) + "\n")
    print(md)
    if args.out_dir:
        write_report(args.out_dir, args.name, md, {**info, "rows": rows})
    if args.dump_kernels:
        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
            __import__("tempfile").gettempdir(), f"torchinductor_{os.environ.get('USER', 'root')}")
        print(f"dumped {dump_kernels(cache, Path(args.dump_kernels))} kernel sources to {args.dump_kernels}")


if __name__ == "__main__":
    main()

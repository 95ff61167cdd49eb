"""
The training loss head's cross-entropy alone: nanoGPT's head compiled (the loss from the logits, its backward
recomputed from them) against fused_loss.cross_entropy_rows (each row's loss and softmax - onehot in one
Triton pass), and that kernel's tuning knobs.

    python -m scripts.bench_loss --out_dir $OUT                    # GPU: GPT-2's and LLaMA-3 1B's logits, bf16
    python -m scripts.bench_loss --device cpu --shapes 64x1000     # smoke test (torch rows only), seconds

Rows, per logits shape (tokens x vocab), median of --iters CUDA-event-timed calls after warm-up:

    logits_head     model.cross_entropy (LogitsCrossEntropy) under torch.compile, forward + backward, with the
                    incoming gradient of the logits materialized as zeros and added, as the compiled training
                    step of a model that returns its logits does (the zero fill and the add are timed)
    fused           cross_entropy_rows(want_grad=True) at the module's knobs, then every --blocks x --warps pair
    loss_only       cross_entropy_rows(want_grad=False): evaluation's one read of the logits
    head_logits, head_fused   (--d_model > 0) the whole loss head, lm_head's matmuls included, compiled, forward
                    and backward under bf16 autocast: nanoGPT's head (logits returned, then the loss) against
                    model.linear_cross_entropy; each profiled (its top kernels in the report)

'GB/s' counts the bytes the kernel must move: the logits read once (and the gradient written once).
"""

import argparse
import itertools
import statistics
import sys

if __name__ == "__main__" and not __package__:
    sys.exit("run from the repository root as a module: python -m scripts.bench_loss ...")

import torch

import fused_loss as fl
from model import cross_entropy, linear_cross_entropy
from scripts.bench_train import (Clock, fmt, kernel_table, markdown_table, parse_ints, parse_shapes, profile_iterations,
                                 render_profile, run_info, write_report)


def head_rows(M, V, args, device, clock, gen, add, profiles):
    """The whole loss head, compiled, forward + backward under bf16 autocast, as the training step runs it: h (M, d)
    float32 (ln_f's output) and the float32 weight (V, d) both take gradients. 'logits': lm_head, then
    model.cross_entropy, the logits returned too (their unused gradient materialized as zeros by the compiled
    backward, as in a model returning them); 'fused': model.linear_cross_entropy (no logits returned)."""
    import torch.nn.functional as F
    h = torch.randn(M, args.d_model, device=device, generator=gen).requires_grad_()
    w = (0.02 * torch.randn(V, args.d_model, device=device, generator=gen)).requires_grad_()
    targets = torch.randint(0, V, (M,), device=device, generator=gen)
    heads = {"logits": lambda h, w, t: (lambda z: (z, cross_entropy(z, t)))(F.linear(h, w)),
             "fused": lambda h, w, t: (None, linear_cross_entropy(h, w, t))}
    for name, fn in heads.items():
        fn = torch.compile(fn) if device.type == "cuda" else fn

        def step(_i=0, fn=fn):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                _, loss = fn(h, w, targets)
            loss.backward()
            h.grad = w.grad = None
        ms = timed(step, clock, args.iters)
        add(f"head_{name} (d={args.d_model}, fwd+bwd)", ms, 0)
        pairs, source = profile_iterations(step, 3, device, clock)
        profiles[f"{name} head, {M}x{V}, d={args.d_model}"] = {**kernel_table(pairs, 3, ms, top=20), "source": source}


def timed(fn, clock: Clock, iters: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    clock.sync()
    ms = []
    for _ in range(iters):
        a = clock.stamp()
        fn()
        b = clock.stamp()
        ms.append((a, b))
    clock.sync()
    return statistics.median(clock.ms(a, b) for a, b in ms)


def sweep(logits, targets, args, clock, add, read, write):
    """The kernel at the module's knobs, then at every --blocks x --warps x --l2_hints setting, then loss only."""
    default = (fl.BLOCK, fl.NUM_WARPS, fl.L2_HINTS)
    grid = itertools.product(parse_ints(args.blocks, "blocks"), parse_ints(args.warps, "warps"),
                             [v.strip().lower() == "true" for v in args.l2_hints.split(",")])
    settings = [default] + [st for st in grid if st != default]
    try:
        for block, warps, hints in settings:
            fl.BLOCK, fl.NUM_WARPS, fl.L2_HINTS = block, warps, hints
            name = f"fused BLOCK={block} warps={warps} l2_hints={hints}"
            try:
                ms = timed(lambda: fl.cross_entropy_rows(logits, targets, True), clock, args.iters)
                add(name, ms, read + write, block=block, warps=warps, l2_hints=hints)
            except Exception as e:  # e.g. out of registers/shared memory at a large block
                print(f"{name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    finally:
        fl.BLOCK, fl.NUM_WARPS, fl.L2_HINTS = default
    add("loss_only (default knobs)", timed(lambda: fl.cross_entropy_rows(logits, targets, False), clock, args.iters),
        read)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="12288x50304,8192x128256", help="logits shapes, tokens x vocab")
    p.add_argument("--blocks", default="4096,8192,16384", help="fused_loss.BLOCK values to sweep")
    p.add_argument("--warps", default="4,8,16", help="fused_loss.NUM_WARPS values to sweep")
    p.add_argument("--l2_hints", default="False", help="fused_loss.L2_HINTS values to sweep: False,True")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--d_model", type=int, default=768,
                   help="also time and profile the whole loss head (lm_head matmuls + loss, forward and backward, "
                        "compiled, bf16 autocast) at this width, nanoGPT's head against the fused one (0: no)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--out_dir", default="")
    p.add_argument("--name", default="bench_loss")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():  # torch's "not compiled with CUDA" traceback came later
        raise SystemExit("No CUDA device: run with --device cpu --shapes 32x100 --iters 1 --d_model 8 for a smoke test")
    info = run_info(args, device, argv, "scripts.bench_loss")
    clock = Clock(device)
    gen = torch.Generator(device=device).manual_seed(0)
    rows, profiles = [], {}
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    for M, V in parse_shapes(args.shapes):
        logits = (torch.randn(M, V, device=device, generator=gen) * 2).to(dtype)
        targets = torch.randint(0, V, (M,), device=device, generator=gen)
        read, write = M * V * logits.element_size(), M * V * logits.element_size()

        def add(name, ms, nbytes, **kw):
            rows.append(dict(shape=f"{M}x{V}", row=name, ms=ms, gbps=nbytes / ms / 1e6 if nbytes else None, **kw))
            print(f"{M}x{V} {name:<28} {ms:8.3f} ms" + (f"  {nbytes / ms / 1e6:8.0f} GB/s" if nbytes else ""), flush=True)

        leaf = logits.detach().requires_grad_()
        head = torch.compile(lambda x, t: (x, cross_entropy(x, t))) if device.type == "cuda" else \
            (lambda x, t: (x, cross_entropy(x, t)))

        def logits_head():
            out, loss = head(leaf, targets)
            torch.autograd.backward([loss, out], [torch.ones((), device=device), torch.zeros_like(out)])
            leaf.grad = None
        add("logits_head (fwd+bwd)", timed(logits_head, clock, args.iters), 2 * read + write)
        if fl.unsupported(logits, targets) is not None:
            add("fused (torch rows)", timed(lambda: fl.cross_entropy_rows(logits, targets, True), clock, args.iters),
                read + write)
        else:
            sweep(logits, targets, args, clock, add, read, write)
        del logits, leaf
        if args.d_model:
            head_rows(M, V, args, device, clock, gen, add, profiles)
    md = ["# The loss head's cross-entropy alone\n", f"{info['date']} on {info['gpu']}, torch {info['torch']}\n",
          f"`{info['command']}`\n",
          markdown_table(["logits", "row", "ms", "GB/s"],
                         [[r["shape"], r["row"], fmt(r["ms"], ".3f"), fmt(r["gbps"], ".0f")] for r in rows])]
    for title, prof in profiles.items():
        md.append("\n" + render_profile(prof, title))
    write_report(args.out_dir, args.name, "\n".join(md), {**info, "rows": rows})


if __name__ == "__main__":
    main()

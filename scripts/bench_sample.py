"""
The sampled decode token's draw alone: model.sample_next as torch ops (backend 'torch') against its Triton
kernels (fused_sample, backend 'triton'), beside the greedy argmax (torch's and the kernel's), at GPT-2's padded vocabulary (50,304 logits a
row, the tokenizer's 50,257 kept) and sample.py's defaults (temperature 0.8, top_k 200); then fused_sample's knobs
one at a time around their defaults.

    python -m scripts.bench_sample --out_dir $OUT                               # GPU: batch 1 and 32, bf16
    python -m scripts.bench_sample --device cpu --vocab 512 --vocab_limit 500 --top_k 20 --steps 2 --reps 1
                                                                                # smoke test: the torch form only

Rows: batch, what is timed, us a call (--steps calls captured in one CUDA graph, the median over --reps replays;
eagerly on the CPU), x the torch form's, and for the kernels whether their token is the torch form's on the same
noise (the scores' maximum equal bit for bit: `same`; greedy: torch.argmax's token).
"""

import argparse
import sys

if __name__ == "__main__" and not __package__:
    sys.exit("run from the repository root as a module: python -m scripts.bench_sample ...")

import torch

import fused_sample
from model import gumbel_scores, sample_next
from scripts.bench_decode_kernel import time_graph
from scripts.bench_gelu import timed
from scripts.bench_train import fmt, markdown_table, run_info, write_report

KNOBS = ("BLOCK", "NUM_WARPS")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def parse_sweep(spec: str):
    """'BLOCK=512,2048 NUM_WARPS=8' -> [('BLOCK', 512), ('BLOCK', 2048), ('NUM_WARPS', 8)]."""
    out = []
    for item in spec.split():
        name, _, values = item.partition("=")
        if name not in KNOBS or not values:
            raise SystemExit(f"--sweep: {item!r} is not KNOB=v1,v2 with KNOB one of {', '.join(KNOBS)}")
        try:
            out += [(name, int(v)) for v in values.split(",")]
        except ValueError:
            raise SystemExit(f"--sweep: {item!r}: values must be integers")
    return out


def same_draw(logits, q, temperature, top_k) -> bool:
    """Whether the kernel's token scores the torch form's maximum, bit for bit, on the same noise q."""
    finite = torch.ones((), dtype=torch.bool, device=logits.device)
    token = fused_sample.draw(logits, q, temperature, top_k, finite)
    scores = gumbel_scores(logits, q, temperature, top_k)
    return bool(finite.item()) and torch.equal(scores.gather(1, token[:, None])[:, 0], scores.max(dim=-1).values)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", default="1,32", help="comma-separated rows a call")
    p.add_argument("--vocab", type=int, default=50304, help="logits a row (GPT-2's padded vocabulary)")
    p.add_argument("--vocab_limit", type=int, default=50257, help="ids kept (sample_next's vocab_limit)")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top_k", type=int, default=200, help="0: no top-k")
    p.add_argument("--dtype", default="bf16", choices=tuple(DTYPES))
    p.add_argument("--sweep", default="BLOCK=256,512,2048,4096 NUM_WARPS=2,8",
                   help="fused_sample knobs, each value timed alone with the others at their defaults ('' for none)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out_dir", default=None)
    p.add_argument("--name", default="bench_sample")
    args = p.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        raise SystemExit(f"--batches: {args.batches!r} is not comma-separated integers")
    for name, value in (("--steps", args.steps), ("--reps", args.reps), ("--vocab", args.vocab),
                        ("--vocab_limit", args.vocab_limit), ("--temperature", args.temperature),
                        *((f"--batches {b}", b) for b in batches)):
        if value <= 0:
            raise SystemExit(f"{name} must be > 0")
    if args.vocab_limit > args.vocab:
        raise SystemExit(f"--vocab_limit {args.vocab_limit} exceeds --vocab {args.vocab}")
    sweep = parse_sweep(args.sweep)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("No CUDA device: run with --device cpu (the torch form only) for a smoke test")
    top_k = args.top_k or None
    info = run_info(args, device, argv, module="scripts.bench_sample")
    kernel = fused_sample.unsupported(torch.empty(1, 1, device=device, dtype=DTYPES[args.dtype])) is None
    rows, table = [], []

    def time_us(fn):
        return time_graph(fn, args.steps, args.reps) if device.type == "cuda" else timed(fn, args.steps, args.reps,
                                                                                         False) * 1e3

    for B in batches:
        g = torch.Generator(device="cpu").manual_seed(B)
        logits = (torch.randn(B, args.vocab, generator=g) * 3).to(device, DTYPES[args.dtype])
        finite = torch.ones((), dtype=torch.bool, device=device)
        base = {}

        def add(case, us, same=None, knob=None):
            row = dict(batch=B, case=case, knob=knob, us=us, vs_torch=us / base["us"] if base else None, same=same)
            rows.append(row)
            table.append([B, case, f"{us:.1f}", fmt(row["vs_torch"], ".3f"), {None: "", True: "yes", False: "NO"}[same]])
            print(" ".join(str(c) for c in table[-1]), flush=True)
            md = (f"# The sampled token's draw ({args.dtype}, vocabulary {args.vocab} -> {args.vocab_limit}, "
                  f"temperature {args.temperature}, top_k {top_k}, {info.get('gpu') or args.device})\n\n"
                  f"`{info['command']}`\n\n"
                  + markdown_table(["batch", "case", "us a call", "x torch form", "same token"], table)
                  + "\n\nsame token: the kernel's token scores the torch form's maximum bit for bit on the same noise "
                  "(greedy: torch.argmax's token).\n")
            write_report(args.out_dir, args.name, md, dict(info, rows=rows))
            return row

        base.update(add("sample_next, torch form", time_us(
            lambda: sample_next(logits, args.temperature, top_k, None, args.vocab_limit, finite, backend="torch"))))
        add("sample_next greedy, torch.argmax", time_us(
            lambda: sample_next(logits, 0, None, None, args.vocab_limit, backend="torch")))
        view = logits[:, :args.vocab_limit]
        add("exponential_ noise alone", time_us(
            lambda: torch.empty(view.shape, dtype=torch.float32, device=device).exponential_(1)))
        if not kernel:
            continue
        q = torch.empty(view.shape, dtype=torch.float32, device=device).exponential_(1)
        settings = [(None, None)] + sweep
        for knob, value in settings:
            saved = {k: getattr(fused_sample, k) for k in KNOBS}
            try:
                if knob is not None:
                    setattr(fused_sample, knob, value)
                setting = f" ({knob}={value})" if knob else " (defaults: " + ", ".join(
                    f"{k}={saved[k]}" for k in KNOBS) + ")"
                same = torch.equal(fused_sample.argmax(view), view.argmax(dim=-1))
                us = time_us(lambda: sample_next(logits, 0, None, None, args.vocab_limit, backend="triton"))
                add("sample_next greedy, kernel" + setting, us, same, f"{knob}={value}" if knob else None)
                same = same_draw(view, q, args.temperature, top_k)
                us = time_us(lambda: sample_next(logits, args.temperature, top_k, None, args.vocab_limit, finite,
                                                 backend="triton"))
                add("sample_next, kernels" + setting, us, same, f"{knob}={value}" if knob else None)
            finally:
                for k, v in saved.items():
                    setattr(fused_sample, k, v)
        add("fused_sample.draw alone (noise given)", time_us(
            lambda: fused_sample.draw(view, q, args.temperature, top_k, finite)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

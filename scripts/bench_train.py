"""
Training speed of every attention variant at GPT-2 124M shapes, one fresh model per variant.

    python scripts/bench_train.py --out_dir results/bench                  # H200: all variants, 12x1024 and 64x256
    python scripts/bench_train.py --variants mha,tucker_8_128_64 --shapes 12x1024
    python scripts/bench_train.py --sdpa_backend cudnn --name bench_train_cudnn --out_dir results/bench
    python scripts/bench_train.py --device=cpu --tiny --out_dir /tmp/bench  # smoke test, seconds

One iteration is what train.py does per micro-step (without gradient clipping, as nanoGPT's
bench loop): forward with the loss under bf16 autocast, backward, fused AdamW step, zero_grad.
Forward, backward and optimizer are timed separately with CUDA events on the device timeline
(no host synchronization inside the timed loop), over --iters iterations after --warmup
iterations (which include torch.compile); each column is the median over iterations, and
"total" is the median of the whole iteration (not the sum of the medians). On CPU the stamps
are perf_counter readings.

Inputs are random token ids (never zeros, which can run faster than real data), rotated among a few
batches. Ratios to MHA are taken against the MHA row of the same shape in the same run, so that
clock and thermal state are shared. A variant that fails (out of memory, a backend that does not
support its head size, a compile error) gets a row with the error and the run goes on.
Each row compiles a fresh model (the first step's wall time, `first_step_s`, says what that
cost); --compile_scope blocks compiles one Block graph shared by all layers instead, for when
the whole-model compiles take too long (results/bench/README.md).

The variant list below is the one place the benchmark variants are defined; bench_decode.py
imports it.
"""

import argparse
import datetime
import gc
import json
import platform
import shlex
import statistics
import subprocess
import sys
import time
import traceback
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from model import GPT, GPTConfig  # noqa: E402

# ----------------------------------------------------------------------------------------
# What is benchmarked

# GPT-2 124M as the paper trains it: no biases; learned absolute positions unless --rope.
BASE = dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50304, bias=False, dropout=0.0)
# --tiny: small enough for a CPU smoke test, wide enough that every variant's ranks below are
# valid unchanged (r1 = 8 <= n_head, ranks 128 <= n_embd, n_head a multiple of 4).
TINY = dict(n_layer=2, n_head=8, n_embd=128, vocab_size=512, bias=False, dropout=0.0)


@dataclass(frozen=True)
class Variant:
    id: str  # the name on the command line (--variants) and in the JSON, as in scripts/paper_tables.py
    label: str  # the method as the paper prints it
    overrides: dict  # GPTConfig fields on top of BASE / TINY


VARIANTS = (
    Variant("mha", "MHA", dict(attn="mha")),
    Variant("gqa4", "GQA [nG=4]", dict(attn="gqa", n_kv_head=4)),
    Variant("gqa2", "GQA [nG=2]", dict(attn="gqa", n_kv_head=2)),
    Variant("mqa", "MQA [nG=1]", dict(attn="gqa", n_kv_head=1)),
    Variant("mla_shared128", "MLA shared K,V [dcK,dcQ=128]", dict(attn="mla", q_rank=128, kv_rank=128, shared_kv=True)),
    Variant("tucker_8_128_128", "Tucker [8,128,128]", dict(attn="tucker", tucker_ranks=(8, 128, 128))),
    Variant("tucker_8_128_64", "Tucker [8,128,64]", dict(attn="tucker", tucker_ranks=(8, 128, 64))),
    Variant("tucker_8_64_64", "Tucker [8,64,64]", dict(attn="tucker", tucker_ranks=(8, 64, 64))),
    Variant("tucker_shared_8_128_128", "Tucker shared K,V [8,128,128]",
            dict(attn="tucker", tucker_ranks=(8, 128, 128), shared_kv=True)),
    Variant("tucker_shared_8_128_64", "Tucker shared K,V [8,128,64]",
            dict(attn="tucker", tucker_ranks=(8, 128, 64), shared_kv=True)),
    Variant("tucker_shared_8_64_64", "Tucker shared K,V [8,64,64]",
            dict(attn="tucker", tucker_ranks=(8, 64, 64), shared_kv=True)),
)
REFERENCE = "mha"  # ratios are taken against this variant


def select_variants(spec: str):
    """'mha,tucker_8_64_64' -> those Variants in the order given; 'all' -> every one."""
    if spec == "all":
        return list(VARIANTS)
    by_id = {v.id: v for v in VARIANTS}
    chosen = []
    for name in spec.split(","):
        name = name.strip()
        if name not in by_id:
            raise SystemExit(f"unknown variant {name!r}; known: {', '.join(by_id)}")
        chosen.append(by_id[name])
    return chosen


def model_config(variant: Variant, *, tiny: bool, rope: bool, block_size: int) -> GPTConfig:
    base = TINY if tiny else BASE
    return GPTConfig(**{**base, "block_size": block_size, "pos_emb": "rope" if rope else "learned",
                        **variant.overrides})


# ----------------------------------------------------------------------------------------
# Helpers shared with bench_decode.py

SDPA_BACKENDS = ("auto", "flash", "cudnn", "efficient", "math")


def sdpa_context(name: str):
    """Restrict F.scaled_dot_product_attention to one backend ('auto': PyTorch's own choice).
    A variant the backend cannot serve fails with 'No available kernel' and is reported as such."""
    if name == "auto":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]
    return sdpa_kernel(backend)


class Clock:
    """Time stamps on the device timeline: CUDA events on a GPU (recording one does not block
    the host, so the timed loop runs as it would in training), perf_counter on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def stamp(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


def reset_peak_memory(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gib(device: torch.device):
    return torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None


def release(device: torch.device, dynamo: bool = False):
    """Free what the last variant left behind before building the next one."""
    if dynamo:
        # Each fresh model is a recompile of GPT.forward; without a reset dynamo's cache limit
        # would be reached after a few variants and the rest would silently run uncompiled.
        torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def short_error(e: BaseException) -> str:
    lines = [line for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0][:240] if lines else ''}"


def run_info(args, device: torch.device) -> dict:
    """Where and how the numbers were taken: enough to tell two runs apart."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except Exception:
        commit = None
    return {
        "command": "python " + shlex.join(sys.argv),
        "argv": sys.argv,
        "args": vars(args),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "git_commit": commit,
    }


def fmt(x, spec: str, missing: str = "—") -> str:
    return missing if x is None else format(x, spec)


def markdown_table(headers, rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_report(out_dir, name: str, markdown: str, payload: dict):
    """name.md and name.json in out_dir (both rewritten after every row, so a killed run keeps
    what it measured)."""
    if not out_dir:
        return
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(markdown + "\n")
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")


def parse_shapes(spec: str):
    """'12x1024,64x256' -> [(12, 1024), (64, 256)] (batch size x sequence length)."""
    shapes = []
    for item in spec.split(","):
        try:
            b, t = item.lower().split("x")
            shapes.append((int(b), int(t)))
        except ValueError:
            raise SystemExit(f"--shapes: {item!r} is not BxT (e.g. 12x1024)")
    return shapes


def parse_ints(spec: str, name: str):
    try:
        return [int(x) for x in spec.split(",")]
    except ValueError:
        raise SystemExit(f"--{name}: {spec!r} is not a comma-separated list of integers")


# ----------------------------------------------------------------------------------------
# One variant at one shape


N_BATCHES = 4  # distinct random batches, rotated (same tokens every step would be a special case)


def bench_one(variant: Variant, batch_size: int, seq_len: int, args, device: torch.device) -> dict:
    cfg = model_config(variant, tiny=args.tiny, rope=args.rope, block_size=seq_len)
    torch.manual_seed(args.seed)
    with torch.device(device):  # initialize on the device: 124M normal draws on a CPU take seconds
        model = GPT(cfg)
    row = {"attn_params": model.attn_params(), "attn_params_mb": model.attn_params() * 2 / 1e6,
           "n_params": model.get_num_params(), "flops_per_token": model.flops_per_token(seq_len)}
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=6e-4, betas=(0.9, 0.95),
                                           device_type=device.type)
    row["fused_adamw"] = bool(optimizer.defaults.get("fused"))
    net = model
    if args.compile and args.compile_scope == "model":
        net = torch.compile(model)  # as train.py does: one graph for the whole model and the loss
    elif args.compile:
        # regional compilation: each Block is compiled, and the 12 identical blocks share one
        # compiled graph, so compiling costs a fraction; embeddings, lm_head and loss run eager
        for block in model.transformer.h:
            block.compile()
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    data = []
    for _ in range(N_BATCHES):  # (x, y) as train.py's get_batch returns them: contiguous, y = x shifted by one
        tokens = torch.randint(cfg.vocab_size, (batch_size, seq_len + 1), device=device, generator=gen)
        data.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
    clock = Clock(device)

    def step(i, stamps=None):
        x, y = data[i % N_BATCHES]

        def mark():  # stamps only in timed steps
            if stamps is not None:
                stamps.append(clock.stamp())
        mark()
        with autocast:
            _, loss = net(x, y)
        mark()
        loss.backward()
        mark()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        mark()
        return loss

    # warm-up: the first step compiles (timed on the wall clock, to see what compile costs)
    t0 = time.perf_counter()
    loss = step(0)
    clock.sync()
    row["first_step_s"] = time.perf_counter() - t0
    if not torch.isfinite(loss).item():
        raise FloatingPointError(f"loss is {loss.item()} at the first step")
    for i in range(1, args.warmup):
        step(i)
    clock.sync()

    iters = []
    for i in range(args.iters):
        stamps = []
        step(i, stamps)
        iters.append(stamps)
    clock.sync()

    def median_ms(a, b):
        return statistics.median(clock.ms(s[a], s[b]) for s in iters)

    total = median_ms(0, 3)
    tokens = batch_size * seq_len
    row.update(fwd_ms=median_ms(0, 1), bwd_ms=median_ms(1, 2), opt_ms=median_ms(2, 3), total_ms=total,
               total_ms_min=min(clock.ms(s[0], s[3]) for s in iters),
               total_ms_max=max(clock.ms(s[0], s[3]) for s in iters),
               tokens_per_s=tokens / (total / 1e3),
               mfu=model.estimate_mfu(tokens, total / 1e3, args.peak_tflops * 1e12, ctx=seq_len),
               peak_mem_gib=peak_memory_gib(device), config=cfg.to_dict())
    return row


# ----------------------------------------------------------------------------------------
# The table


def add_ratios(rows, keys, group_keys):
    """value / value of the REFERENCE row with the same group (e.g. same shape), in place."""
    ref = {tuple(r[k] for k in group_keys): r for r in rows if r["variant"] == REFERENCE and r["status"] == "ok"}
    for r in rows:
        base = ref.get(tuple(r[k] for k in group_keys))
        for key in keys:
            ok = base is not None and r["status"] == "ok" and base.get(key) and r.get(key) is not None
            r[f"{key}_vs_{REFERENCE}"] = r[key] / base[key] if ok else None


def render(rows, info) -> str:
    headers = ["variant", "shape", "fwd ms", "bwd ms", "opt ms", "total ms", "time ×MHA", "tokens/s",
               "MFU %", "peak GiB", "attn params MB", "note"]
    body = []
    for r in rows:
        ok = r["status"] == "ok"
        body.append([
            r["label"], r["shape"],
            fmt(r.get("fwd_ms"), ".2f"), fmt(r.get("bwd_ms"), ".2f"), fmt(r.get("opt_ms"), ".2f"),
            fmt(r.get("total_ms"), ".2f"), fmt(r.get("total_ms_vs_mha"), ".3f"),
            fmt(r.get("tokens_per_s"), ",.0f"), fmt(r["mfu"] * 100 if ok else None, ".1f"),
            fmt(r.get("peak_mem_gib"), ".2f"), fmt(r.get("attn_params_mb"), ".2f"),
            "" if ok else r["error"].replace("|", "/"),
        ])
    a = info["args"]
    head = (f"# Training step, {'tiny model' if a['tiny'] else 'GPT-2 124M'}"
            f" ({'RoPE' if a['rope'] else 'learned positions'}, bias=False)\n\n"
            f"{info['date']} on {info['gpu'] or info['device']}, torch {info['torch']}, "
            f"compile={a['compile']}{' (' + a['compile_scope'] + ')' if a['compile'] else ''}, "
            f"bf16 autocast, fused AdamW, SDPA backend {a['sdpa_backend']}; "
            f"median of {a['iters']} iterations after {a['warmup']} warm-up; "
            f"MFU against {a['peak_tflops']:g} TFLOP/s.\n\n`{info['command']}`\n\n")
    return head + markdown_table(headers, body)


def add_common_args(p, name: str) -> None:
    """Options both benchmarks share (bench_decode.py imports this)."""
    p.add_argument("--sdpa_backend", default="auto", choices=SDPA_BACKENDS)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="a tiny model (CPU smoke test)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--out_dir", default=None, help="write NAME.md and NAME.json here")
    p.add_argument("--name", default=name, help="file name stem of the outputs (e.g. one per backend)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default="all",
                   help="comma-separated ids or 'all': " + ", ".join(v.id for v in VARIANTS))
    p.add_argument("--shapes", default=None, help="comma-separated BxT (default 12x1024,64x256; --tiny: 4x64)")
    p.add_argument("--rope", action="store_true", help="RoPE instead of learned positions (MLA: decoupled)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model (default: on for cuda, off for cpu)")
    p.add_argument("--compile_scope", default="model", choices=("model", "blocks"),
                   help="'model': torch.compile(model) as train.py (default); 'blocks': compile each Block "
                        "(one shared graph: much faster to compile; embeddings, lm_head and loss stay eager)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations (default 50; --tiny: 3)")
    p.add_argument("--warmup", type=int, default=None,
                   help="warm-up iterations, compile included (default 20; --tiny: 1)")
    p.add_argument("--peak_tflops", type=float, default=790.0, help="bf16 matmul rate measured on the H200")
    add_common_args(p, name="bench_train")
    args = p.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --device=cpu --tiny for a smoke test")
    args.compile = (device.type == "cuda") if args.compile is None else args.compile
    args.iters = args.iters or (3 if args.tiny else 50)
    args.warmup = max(1, args.warmup if args.warmup is not None else (1 if args.tiny else 20))
    args.shapes = args.shapes or ("4x64" if args.tiny else "12x1024,64x256")
    shapes, variants = parse_shapes(args.shapes), select_variants(args.variants)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # as train.py (only fp32 leftovers are affected)
        torch.backends.cudnn.allow_tf32 = True

    info = run_info(args, device)
    rows = []
    print(f"{info['command']}\n{info['gpu'] or info['device']}, torch {info['torch']}", flush=True)
    for batch_size, seq_len in shapes:
        for v in variants:
            row = {"variant": v.id, "label": v.label, "shape": f"{batch_size}x{seq_len}",
                   "batch_size": batch_size, "seq_len": seq_len}
            t0 = time.perf_counter()
            try:
                reset_peak_memory(device)
                with sdpa_context(args.sdpa_backend):
                    row.update(bench_one(v, batch_size, seq_len, args, device))
                row.update(status="ok", error=None)
            except Exception as e:  # OOM, unsupported backend, compile failure: report, go on
                traceback.print_exc()
                row.update(status="error", error=short_error(e))
            release(device, dynamo=args.compile)
            row["wall_s"] = time.perf_counter() - t0
            rows.append(row)
            add_ratios(rows, ["total_ms", "tokens_per_s", "peak_mem_gib"], ["shape"])
            msg = (f"total {row['total_ms']:.2f} ms, {row['tokens_per_s']:,.0f} tok/s, MFU {row['mfu'] * 100:.1f}%"
                   if row["status"] == "ok" else row["error"])
            first = f", first step {row['first_step_s']:.1f} s" if "first_step_s" in row else ""
            print(f"[{row['shape']}] {v.id:24s} {msg}  ({row['wall_s']:.0f} s{first})", flush=True)
            markdown = render(rows, info)
            write_report(args.out_dir, args.name, markdown, {**info, "rows": rows})
    print("\n" + markdown, flush=True)
    return rows


if __name__ == "__main__":
    main()

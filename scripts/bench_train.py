"""
Training speed of every attention variant, one fresh model per variant: GPT-2 124M shapes (the
Shakespeare/OpenWebText tables), or the LLaMA-3 1B rows of the paper's timing table at N=4096.

    python -m scripts.bench_train --out_dir results/bench                  # GPU: all variants, 12x1024 and 64x256
    python -m scripts.bench_train --variants mha,tucker_8_64_64 --shapes 12x1024 --rope both
    python -m scripts.bench_train --nanogpt .carry/nanogpt --profile mha,tucker_8_64_64 --out_dir $OUT
    python -m scripts.bench_train --suite llama1b --variants gqa8,mha,tucker_32_64_64 --out_dir $OUT
    python -m scripts.bench_train --device=cpu --tiny --out_dir /tmp/bench  # smoke test, seconds

One iteration is what train.py does per iteration (without gradient clipping, as nanoGPT's
bench loop): --grad_accum micro-steps of forward with the loss under bf16 autocast and
backward, then the fused AdamW step and zero_grad. Forward, backward and optimizer are timed
separately with CUDA events on the device timeline (no host synchronization inside the timed
loop), over --iters iterations after --warmup iterations (which include torch.compile); each
column is the median over iterations (forward and backward summed over the micro-steps), and
"total" is the median of the whole iteration (not the sum of the medians). On CPU the stamps are
perf_counter readings.

Inputs are random token ids (never zeros, which can run faster than real data), rotated among a few
batches. Ratios to MHA (and, in the LLaMA suite, to GQA-8) are taken against the reference row of
the same shape and positions in the same run, so that clock and thermal state are shared. A
variant that fails (out of memory, a backend that does not support its head size, a compile
error) gets a row with the error and the run goes on; a row that --time_budget leaves no time
for gets a row saying so.

Side by side with nanoGPT (--nanogpt DIR, a copy of ../shared/peers/nanogpt outside the
project): its unchanged bench.py runs as a subprocess (--real_data=False --compile=True, our
batch shapes) before and after our rows, and each row's "vs nanoGPT" is its tokens/s over
nanoGPT's. Both sides are then timed nanoGPT's way (wall clock over 20 iterations, loss.item()
after each), our rows in addition to the event timing above.

--profile VARIANTS runs torch.profiler over a few more iterations of those rows (the model is
already compiled) and reports the top CUDA kernels by total time, grouped into matmul,
attention, fused Triton, optimizer, memory and other.

Compile time. Each row compiles a fresh model (`first_step_s` says what that cost). --precompile N
first runs N worker processes that compile every row (and nanoGPT's bench) in parallel, filling
inductor's on-disk caches (FX graphs, AOTAutograd, Triton kernels); the measuring pass that
follows, one row at a time on an otherwise idle GPU, then only re-traces and loads. The workers'
numbers are thrown away. --compile_scope blocks compiles one Block graph shared by all layers
instead, for when whole-model compiles take too long (results/bench/LOG.md).

The variant list below is the one place the GPT-2 benchmark variants are defined; bench_decode.py
imports it. The LLaMA rows are scripts/paper_tables.py's, built from their config files.
"""

import argparse
import contextlib
import dataclasses
import datetime
import gc
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Sequence

if __name__ == "__main__" and not __package__:  # run as a file, the repository's modules are not importable
    sys.exit("run from the repository root as a module: python -m scripts.bench_train ...")

import torch

from graph_step import WARMUP as GRAPH_WARMUP, GraphedTrainStep, check_graph_step
from model import GPT, GPTConfig, train_compile_options
from scripts.gpu_clock import ClockLog

REPO = Path(__file__).resolve().parents[1]
MODULE = "scripts.bench_train"

# ----------------------------------------------------------------------------------------
# What is benchmarked

# GPT-2 124M as the paper trains it: no biases; learned absolute positions unless --rope.
BASE = dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50304, bias=False, dropout=0.0)
# --tiny: small enough for a CPU smoke test, wide enough that every variant's ranks below are
# valid unchanged (r1 = 8 <= n_head, ranks 128 <= n_embd, n_head a multiple of 4).
TINY = dict(n_layer=2, n_head=8, n_embd=128, vocab_size=512, bias=False, dropout=0.0)
# --suite llama1b --tiny: the LLaMA rows' keys with small shapes; 32 heads so that Tucker's r1 = 32
# and GQA-8 stay valid, d = 256 so that ranks 128 do.
TINY_LLAMA = dict(n_layer=2, n_head=32, n_embd=256, mlp_hidden=512, vocab_size=512)


@dataclass(frozen=True)
class Variant:
    id: str  # the name on the command line (--variants) and in the JSON, as in scripts/paper_tables.py
    label: str  # the method as the paper prints it
    overrides: dict  # GPTConfig fields on top of BASE / TINY (llama1b: all fields of the row's config file)


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


@dataclass(frozen=True)
class Suite:
    name: str
    model: str  # for the report's title
    shapes: str  # default --shapes
    tiny_shapes: str
    iters: int  # default --iters / --warmup (--tiny: 3 / 1)
    warmup: int
    references: tuple  # ratios are taken against each of these variants


SUITES = {
    "gpt2": Suite("gpt2", "GPT-2 124M", "12x1024,64x256", "4x64", 50, 20, ("mha",)),
    "llama1b": Suite("llama1b", "LLaMA-3 1B (L=16, d=2048, nH=32, SwiGLU 8192, RoPE)", "2x4096", "2x32", 10, 3,
                     ("gqa8", "mha")),
}


def select_variants(spec: str, available=VARIANTS):
    """'mha,tucker_8_64_64' -> those Variants in the order given; 'all' -> every one."""
    if spec == "all":
        return list(available)
    by_id = {v.id: v for v in available}
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


def llama_variants():
    """The LLaMA-3 1B rows of the paper's timing table (scripts/paper_tables.py) as Variants whose
    overrides are all GPTConfig fields of the row's config file, resolved as train.py would."""
    from scripts.paper_tables import TABLES, build_config
    out = []
    for row in TABLES["llama1b"].rows:
        cfg = build_config(row, "on")
        cfg.pop("block_size", None)
        out.append(Variant(row.id, row.label, cfg))
    return out


def llama_paper_iter_s():
    """Row id -> the paper's train iteration time (s per 128 x 4096 tokens on 4 H100s)."""
    from scripts.paper_tables import TABLES
    return {row.id: row.paper["on"]["train_iter_ms"] for row in TABLES["llama1b"].rows}


def has_activation_checkpointing() -> bool:
    return any(f.name == "activation_checkpointing" for f in dataclasses.fields(GPTConfig))


def row_config(variant: Variant, args, rope: bool, seq_len: int) -> GPTConfig:
    """The GPTConfig of one row: the suite's model, this variant, block_size = the sequence length."""
    if args.suite == "llama1b":
        cfg = GPTConfig(**{**variant.overrides, **(TINY_LLAMA if args.tiny else {}), "block_size": seq_len,
                           "dropout": 0.0})
    else:
        cfg = model_config(variant, tiny=args.tiny, rope=rope, block_size=seq_len)
    if getattr(args, "act_ckpt", False):
        cfg = dataclasses.replace(cfg, activation_checkpointing=True)
    if getattr(args, "loss_chunk", 0):
        cfg = dataclasses.replace(cfg, loss_chunk_tokens=args.loss_chunk)
    return cfg


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


def command_line(argv=None, module=None) -> str:
    """The command as it was typed: `python -m scripts.x ARGS` when run as a module (or when main()
    is called with an explicit argv for `module`), else `python FILE ARGS`."""
    if argv is not None and module:
        return f"python -m {module} {shlex.join(argv)}".rstrip()
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name and spec.name.startswith("scripts."):
        return f"python -m {spec.name} {shlex.join(sys.argv[1:])}".rstrip()
    return "python " + shlex.join(sys.argv)


def run_info(args, device: torch.device, argv=None, module=None) -> dict:
    """Where and how the numbers were taken: enough to tell two runs apart."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except Exception:
        commit = None
    return {
        "command": command_line(argv, module),
        "argv": list(argv) if argv is not None else sys.argv,
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


def inductor_overrides(items: Sequence[str]) -> Dict[str, object]:
    """--inductor KEY=VALUE items as torch.compile options: True/False, an integer, else the string."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--inductor: {item!r} is not KEY=VALUE (e.g. triton.mix_order_reduction=True)")
        out[key] = {"True": True, "False": False}.get(value, int(value) if value.lstrip("-").isdigit() else value)
    return out


def parse_ints(spec: str, name: str):
    try:
        return [int(x) for x in spec.split(",")]
    except ValueError:
        raise SystemExit(f"--{name}: {spec!r} is not a comma-separated list of integers")


# ----------------------------------------------------------------------------------------
# Where the time goes: the profile's kernels

PROFILE_STEPS = 5  # profiled iterations per row (after the timed ones: no compile in them)
PROFILE_TOP = 15

# First match wins: inductor's kernels are named after the ops they fuse (a transpose feeding SDPA:
# triton_poi_fused__scaled_dot_product_flash_attention_...), and flash/cuDNN attention kernels also
# carry 'cutlass' or 'sm90' in their names. (On a CPU run the names are ATen operators.)
KERNEL_CATEGORIES = (
    ("fused (triton)", re.compile(r"^triton_", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|attn", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|wgmma|^sm\d+_|ampere_|hopper|aten::(mm|addmm|bmm)$", re.I)),
    ("optimizer", re.compile(r"multi_tensor|adam|foreach", re.I)),
    ("memory", re.compile(r"memcpy|memset", re.I)),
)


def kernel_category(name: str) -> str:
    for category, pattern in KERNEL_CATEGORIES:
        if pattern.search(name):
            return category
    return "other"


_ANNOTATION = re.compile(r"ProfilerStep.*|[\w.]+#[\w.]+")  # host ranges on the device timeline, not kernels


def kernel_times(events):
    """(name, µs) for every device kernel (and memcpy/memset) of a torch.profiler event list, and
    the source: 'cuda'. Without device events (a CPU run) the CPU operators' self times instead,
    source 'cpu' (the profiler's step markers left out)."""
    from torch.autograd import DeviceType
    # The device timeline also carries the host's ranges (ProfilerStep#N, Optimizer.step#AdamW.step)
    # as GPU user annotations spanning the kernels they launched: counted as kernels they doubled the
    # kernel time (busy % above 100). Inductor's Triton kernels do have a host event of the same name
    # (their launch), so the annotations are told apart by their flag and their names: 'Word.word#Word.word'
    # or 'ProfilerStep*'. A '#' alone proves nothing: ATen kernels with lambdas are named '...{lambda()#1}...'
    # (GELU, index_copy_), and an earlier filter on '#' dropped them (36 launches per GPT-2 decode step).
    kernels = [(e.name, e.time_range.elapsed_us()) for e in events if e.device_type == DeviceType.CUDA
               and not getattr(e, "is_user_annotation", False) and not _ANNOTATION.fullmatch(e.name)]
    if kernels:
        return kernels, "cuda"
    return [(e.name, e.self_cpu_time_total) for e in events
            if e.device_type == DeviceType.CPU and not e.name.startswith("ProfilerStep")
            and e.self_cpu_time_total > 0], "cpu"


def kernel_table(pairs, n_steps: int, step_ms, top: int = PROFILE_TOP) -> dict:
    """Aggregate (name, µs) pairs of n_steps iterations by name: the top kernels by total time
    (calls and ms per iteration, % of the iteration's median time step_ms), the time per category,
    and how much of the iteration the kernels cover (busy %: below 100, the GPU waited)."""
    agg = {}
    for name, us in pairs:
        a = agg.setdefault(name, [0, 0.0])
        a[0] += 1
        a[1] += us
    per_step = lambda us: us / 1e3 / n_steps  # noqa: E731
    pct = lambda ms: 100 * ms / step_ms if step_ms else None  # noqa: E731
    kernel_ms = per_step(sum(us for _, us in agg.values()))
    categories = {}
    for name, (_, us) in agg.items():
        cat = kernel_category(name)
        categories[cat] = categories.get(cat, 0.0) + per_step(us)
    ranked = sorted(agg.items(), key=lambda kv: -kv[1][1])
    return {
        "n_steps": n_steps, "step_ms": step_ms, "kernel_ms_per_step": kernel_ms, "busy_pct": pct(kernel_ms),
        "n_kernels": len(agg), "calls_per_step": sum(c for c, _ in agg.values()) / n_steps,
        "categories": {c: {"ms": ms, "pct": pct(ms)} for c, ms in sorted(categories.items(), key=lambda kv: -kv[1])},
        "top": [{"name": name, "category": kernel_category(name), "calls": calls / n_steps, "ms": per_step(us),
                 "pct": pct(per_step(us))} for name, (calls, us) in ranked[:top]],
    }


def profile_iterations(step, n_steps: int, device: torch.device, clock: "Clock"):
    """torch.profiler over n_steps calls of step(i), after one profiled-and-discarded call (the
    profiler's own warm-up); the recorded events' (name, µs) pairs and their source."""
    from torch.profiler import ProfilerActivity, profile, schedule
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    captured = []  # the active cycle's events, handed over when it ends
    clock.sync()
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=n_steps, repeat=1),
                 on_trace_ready=lambda p: captured.append(kernel_times(p.events()))) as prof:
        for i in range(n_steps + 1):
            step(i)
            clock.sync()  # the step's kernels are done before the profiler moves on
            prof.step()
    if not captured:
        raise RuntimeError("torch.profiler recorded no cycle")
    return captured[0]


def render_profile(p: dict, title: str) -> str:
    cats = ", ".join(f"{c} {v['ms']:.2f} ms ({fmt(v['pct'], '.0f')}%)" for c, v in p["categories"].items())
    head = (f"### Where the time goes: {title}\n\n"
            f"{p['n_steps']} profiled iterations ({p['source']} {'kernels' if p['source'] == 'cuda' else 'operators'}); "
            f"per iteration: {p['kernel_ms_per_step']:.2f} ms of kernels in a {fmt(p['step_ms'], '.2f')} ms step "
            f"(busy {fmt(p['busy_pct'], '.0f')}%), {p['calls_per_step']:.0f} {'launches' if p['source'] == 'cuda' else 'calls'}, "
            f"{p['n_kernels']} distinct. "
            f"By category: {cats}.\n\n")
    body = [[i + 1, "`" + (k["name"][:100] + ("…" if len(k["name"]) > 100 else "")).replace("|", "/") + "`",
             k["category"], fmt(k["calls"], ".0f"), fmt(k["ms"], ".3f"), fmt(k["pct"], ".1f")]
            for i, k in enumerate(p["top"])]
    return head + markdown_table(["#", "kernel", "category", "calls", "ms", "% of step"], body)


# ----------------------------------------------------------------------------------------
# nanoGPT's own bench.py, run unchanged beside ours

NANOGPT_FILES = ("bench.py", "model.py", "configurator.py")
NANOGPT_RESULT = re.compile(r"time per iteration: ([0-9.]+)ms, MFU: (-?[0-9.]+)%")
NANOGPT_OVERRIDE = re.compile(r"^Overriding: (\w+) = (.*)$", re.M)
NANOGPT_LOSS = re.compile(r"^(\d+)/(\d+) loss: (\S+)$", re.M)
NANOGPT_STEPS = 20  # its timed iterations (after 10 burn-in); our loop_ms uses as many


def nanogpt_command(batch_size: int, block_size: int):
    return [sys.executable, "bench.py", "--real_data=False", "--compile=True",
            f"--batch_size={batch_size}", f"--block_size={block_size}"]


def parse_nanogpt(text: str) -> dict:
    """What nanoGPT's bench.py printed: ms per iteration and its MFU (A100 basis) from the last
    'time per iteration' line, the overrides its configurator applied, the last loss."""
    found = NANOGPT_RESULT.findall(text)
    if not found:
        raise ValueError("no 'time per iteration: X ms, MFU: Y%' line in nanoGPT's output")
    ms, mfu = (float(x) for x in found[-1])
    losses = NANOGPT_LOSS.findall(text)
    return {"ms_per_iter": ms, "mfu_printed": mfu / 100, "overrides": dict(NANOGPT_OVERRIDE.findall(text)),
            "last_loss": float(losses[-1][2]) if losses else None}


def check_nanogpt_folder(folder) -> Path:
    path = Path(folder).resolve()
    missing = [f for f in NANOGPT_FILES if not (path / f).is_file()]
    if missing:
        raise SystemExit(f"--nanogpt {folder}: {', '.join(missing)} not found (a copy of ../shared/peers/nanogpt)")
    return path


def run_nanogpt(folder: Path, batch_size: int, block_size: int, timeout: float) -> dict:
    """nanoGPT's bench.py at one shape, in its own folder (it reads configurator.py from the working
    directory); ms per iteration, tokens/s, and what it printed."""
    cmd = nanogpt_command(batch_size, block_size)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        raise RuntimeError(f"nanoGPT bench.py exited {proc.returncode}: {tail[-1][:240] if tail else ''}")
    out = parse_nanogpt(proc.stdout)
    applied = out["overrides"]
    if applied.get("batch_size") != str(batch_size) or applied.get("block_size") != str(block_size):
        raise RuntimeError(f"nanoGPT did not apply the shape overrides (it printed {applied})")
    out.update(tokens_per_s=batch_size * block_size / (out["ms_per_iter"] / 1e3), wall_s=wall,
               command=shlex.join(cmd[1:]), stdout_tail=proc.stdout[-400:])
    return out


# ----------------------------------------------------------------------------------------
# One variant at one shape


N_BATCHES = 4  # distinct random batches, rotated (same tokens every step would be a special case)
CACHE_COUNTERS = (("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
                  ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss"))


def compile_counters() -> dict:
    from torch._dynamo.utils import counters
    return {key: counters[group][key] for group, key in CACHE_COUNTERS}


def bench_one(variant: Variant, batch_size: int, seq_len: int, args, device: torch.device, rope: bool = False,
              profile: bool = False) -> dict:
    cfg = row_config(variant, args, rope, seq_len)
    torch.manual_seed(args.seed)
    with torch.device(device):  # initialize on the device: 124M normal draws on a CPU take seconds
        model = GPT(cfg)
    row = {"attn_params": model.attn_params(), "attn_params_mb": model.attn_params() * 2 / 1e6,
           "n_params": model.get_num_params(), "flops_per_token": model.flops_per_token(seq_len)}
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=6e-4, betas=(0.9, 0.95),
                                           device_type=device.type, master_weights=args.master_weights,
                                           micro_steps=args.grad_accum)
    row["fused_adamw"] = bool(optimizer.defaults.get("fused"))
    row["optimizer"] = type(optimizer).__name__
    net = model
    if args.compile and args.compile_scope == "model":
        # as train.py does: one graph for the whole model and the loss, with its inductor options
        net = torch.compile(model, options=train_compile_options(args.compile_mode, inductor_overrides(args.inductor)))
    elif args.compile:
        # regional compilation: each Block is compiled, and the identical blocks share one
        # compiled graph, so compiling costs a fraction; embeddings, lm_head and loss run eager
        for block in model.transformer.h:
            block.compile()
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    data = []
    for _ in range(N_BATCHES):  # (x, y) as evaluate.Batches.get returns them to train.py: contiguous, y = x shifted by one
        tokens = torch.randint(cfg.vocab_size, (batch_size, seq_len + 1), device=device, generator=gen)
        data.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
    clock = Clock(device)
    accum = args.grad_accum
    graph = None
    if args.graph_step:  # train.py's graph_step: the whole iteration replayed from one CUDA graph
        graph = GraphedTrainStep(net, optimizer, accum=accum, batch_size=batch_size, seq_len=seq_len, device=device,
                                 dtype="bfloat16", warmup=GRAPH_WARMUP)

    def step(i, stamps=None):
        """One iteration: `accum` micro-steps (stamps: forward start, forward end, backward end
        each), then the optimizer (stamp at its end): 3 accum + 1 stamps. A graphed iteration:
        2 stamps (start, end)."""
        def mark():  # stamps only in timed steps
            if stamps is not None:
                stamps.append(clock.stamp())
        if graph is not None:
            mark()
            loss = graph([data[(i * accum + m) % N_BATCHES] for m in range(accum)], 6e-4)
            mark()
            return loss
        for m in range(accum):
            x, y = data[(i * accum + m) % N_BATCHES]
            mark()
            with autocast:
                _, loss = net(x, y)
            if accum > 1:
                loss = loss / accum  # as train.py scales each micro-step
            mark()
            loss.backward()
            mark()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        mark()
        return loss

    # warm-up: the first step compiles (timed on the wall clock, to see what compile costs)
    before = compile_counters()
    t0 = time.perf_counter()
    loss = step(0)
    clock.sync()
    row["first_step_s"] = time.perf_counter() - t0
    row["compile_cache"] = {k: v - before[k] for k, v in compile_counters().items()}
    if not torch.isfinite(loss).item():
        raise FloatingPointError(f"loss is {loss.item()} at the first step")
    for i in range(1, max(args.warmup, GRAPH_WARMUP + 2 if graph is not None else 0)):
        step(i)
    clock.sync()

    iters = []
    walls = row["wall_times"] = {"timed": [time.time()]}  # epoch seconds: to line up with a GPU clock/power log
    for i in range(args.iters):
        stamps = []
        step(i, stamps)
        iters.append(stamps)
    clock.sync()
    walls["timed"].append(time.time())

    def median_of(f):
        return statistics.median(f(s) for s in iters)

    end = 1 if graph is not None else 3 * accum
    total = median_of(lambda s: clock.ms(s[0], s[end]))
    tokens = batch_size * seq_len * accum
    if graph is None:
        row.update(fwd_ms=median_of(lambda s: sum(clock.ms(s[3 * m], s[3 * m + 1]) for m in range(accum))),
                   bwd_ms=median_of(lambda s: sum(clock.ms(s[3 * m + 1], s[3 * m + 2]) for m in range(accum))),
                   opt_ms=median_of(lambda s: clock.ms(s[end - 1], s[end])))
    else:  # one replay: only its total is known
        row.update(fwd_ms=None, bwd_ms=None, opt_ms=None)
    row.update(total_ms=total,
               total_ms_min=min(clock.ms(s[0], s[end]) for s in iters),
               total_ms_max=max(clock.ms(s[0], s[end]) for s in iters),
               tokens_per_s=tokens / (total / 1e3),
               mfu=model.estimate_mfu(tokens, total / 1e3, args.peak_tflops * 1e12, ctx=seq_len),
               peak_mem_gib=peak_memory_gib(device), config=cfg.to_dict())

    if args.nanogpt or args.loop:
        # nanoGPT's way: wall clock over its number of iterations, the loss read back after each
        n = min(NANOGPT_STEPS, max(args.iters, 1))
        clock.sync()
        walls["loop"] = [time.time()]
        t0 = time.perf_counter()
        ends = []  # each iteration's end: the spread of the loop's iterations (the mean is nanoGPT's figure)
        for i in range(n):
            step(i).item()
            ends.append(time.perf_counter())
        clock.sync()
        row["loop_ms"] = (time.perf_counter() - t0) / n * 1e3
        walls["loop"].append(time.time())
        each = [(b - a) * 1e3 for a, b in zip([t0] + ends[:-1], ends)]
        row["loop_ms_median"], row["loop_ms_max"] = statistics.median(each), max(each)
        row["loop_tokens_per_s"] = tokens / (row["loop_ms"] / 1e3)
        # where that loop's time goes, in a second loop of as many iterations: the GPU time of each step
        # (events, as the timed rows, but now after a sync every iteration) and the host's time inside the
        # step call (from its first line to its return: launching it; the loss read-back not included)
        gpu, host = [], []
        clock.sync()
        walls["loop2"] = [time.time()]
        t0 = time.perf_counter()
        for i in range(n):
            stamps = []
            h0 = time.perf_counter()
            loss = step(i, stamps)
            host.append((time.perf_counter() - h0) * 1e3)
            loss.item()
            gpu.append(stamps)
        clock.sync()
        row["loop2_ms"] = (time.perf_counter() - t0) / n * 1e3  # this loop's own wall clock per iteration
        walls["loop2"].append(time.time())
        row["loop_event_ms"] = statistics.mean(clock.ms(s[0], s[end]) for s in gpu)
        row["loop_host_ms"] = statistics.mean(host)

    if profile:
        pairs, source = profile_iterations(step, PROFILE_STEPS, device, clock)
        row["profile"] = {**kernel_table(pairs, PROFILE_STEPS, total, top=getattr(args, "profile_top", PROFILE_TOP)),
                          "source": source}
    return row


# ----------------------------------------------------------------------------------------
# The table


def add_ratios(rows, keys, group_keys, reference: str = REFERENCE):
    """value / value of the `reference` row with the same group (e.g. same shape), in place, as
    f'{key}_vs_{reference}'."""
    ref = {tuple(r.get(k) for k in group_keys): r for r in rows if r["variant"] == reference and r["status"] == "ok"}
    for r in rows:
        base = ref.get(tuple(r.get(k) for k in group_keys))
        for key in keys:
            ok = base is not None and r["status"] == "ok" and base.get(key) and r.get(key) is not None
            r[f"{key}_vs_{reference}"] = r[key] / base[key] if ok else None


def add_rope_cost(rows):
    """RoPE rows: total_ms / total_ms of the same variant and shape with learned positions - 1."""
    learned = {(r["variant"], r["shape"]): r for r in rows if r.get("pos") == "learned" and r["status"] == "ok"}
    for r in rows:
        base = learned.get((r["variant"], r["shape"]))
        ok = r.get("pos") == "rope" and r["status"] == "ok" and base is not None
        r["rope_cost"] = r["total_ms"] / base["total_ms"] - 1 if ok else None


def add_nanogpt_ratios(rows, nanogpt: dict):
    """Each row's tokens/s over nanoGPT's at the same shape, both timed nanoGPT's way
    (loop_ms: wall clock, loss read back every iteration); nanoGPT's mean over its runs."""
    for r in rows:
        runs = [x for x in nanogpt.get(r["shape"], []) if x.get("status") == "ok"]
        ok = runs and r["status"] == "ok" and r.get("loop_ms")
        mean_ms = statistics.mean(x["ms_per_iter"] for x in runs) if runs else None
        r["vs_nanogpt"] = mean_ms / r["loop_ms"] if ok else None


def nanogpt_section(nanogpt: dict, rows, flops_mha: dict, peak_tflops: float) -> str:
    body = []
    for shape, runs in nanogpt.items():
        ok = [x for x in runs if x.get("status") == "ok"]
        by_when = {x["when"]: x for x in runs}
        mean_ms = statistics.mean(x["ms_per_iter"] for x in ok) if ok else None
        b, t = (int(v) for v in shape.split("x"))
        tps = b * t / (mean_ms / 1e3) if mean_ms else None
        mha = next((r for r in rows if r["variant"] == "mha" and r["shape"] == shape and r.get("pos", "learned") == "learned"
                    and r["status"] == "ok"), None)

        def cell(when):
            x = by_when.get(when)
            if x is None:
                return "—"
            return fmt(x.get("ms_per_iter"), ".2f") if x.get("status") == "ok" else x["error"].replace("|", "/")
        body.append([shape, cell("before"), cell("after"), fmt(tps, ",.0f"),
                     fmt(flops_mha[shape] * tps / (peak_tflops * 1e12) * 100 if tps else None, ".1f"),
                     fmt(statistics.mean(x["mfu_printed"] for x in ok) * 100 if ok else None, ".1f"),
                     fmt(mha.get("loop_ms") if mha else None, ".2f"), fmt(mha.get("total_ms") if mha else None, ".2f"),
                     fmt(mha.get("vs_nanogpt") if mha else None, ".3f")])
    return ("## nanoGPT's bench.py beside ours (same GPU, same call)\n\n"
            "nanoGPT at commit 3adf61e, `bench.py --real_data=False --compile=True` with our batch shapes, run "
            "before and after our rows: ms per iteration is its own print (wall clock over 20 iterations, "
            "loss.item() after each). MFU on our basis: MHA's FLOP count (`flops_per_token`) x tokens/s over "
            f"{peak_tflops:g} TFLOP/s; its printed MFU is against an A100 (312). Our MHA `loop ms` is timed "
            "the same way; `×nanoGPT` = nanoGPT ms (mean of its runs) / our loop ms, i.e. our tokens/s over its.\n\n"
            + markdown_table(["shape", "nanoGPT before ms", "nanoGPT after ms", "nanoGPT tokens/s", "nanoGPT MFU %",
                              "its printed MFU % (A100)", "our MHA loop ms", "our MHA event ms", "MHA ×nanoGPT"], body))


def render(rows, info, nanogpt=None, flops_mha=None, profiles: bool = True) -> str:
    a = info["args"]
    if a.get("suite", "gpt2") == "llama1b":
        return render_llama(rows, info, profiles)
    both = a.get("rope") == "both"
    headers = ["variant", "shape"] + (["pos"] if both else []) + ["fwd ms", "bwd ms", "opt ms", "total ms",
                                                                  "time ×MHA", "tokens/s"]
    headers += (["vs nanoGPT"] if a.get("nanogpt") else []) + ["MFU %"] + (["RoPE cost %"] if both else [])
    headers += ["peak GiB", "attn params MB", "note"]
    body = []
    for r in rows:
        ok = r["status"] == "ok"
        line = [r["label"], r["shape"]] + ([r.get("pos", "")] if both else [])
        line += [fmt(r.get("fwd_ms"), ".2f"), fmt(r.get("bwd_ms"), ".2f"), fmt(r.get("opt_ms"), ".2f"),
                 fmt(r.get("total_ms"), ".2f"), fmt(r.get("total_ms_vs_mha"), ".3f"), fmt(r.get("tokens_per_s"), ",.0f")]
        line += [fmt(r.get("vs_nanogpt"), ".3f")] if a.get("nanogpt") else []
        line += [fmt(r["mfu"] * 100 if ok else None, ".1f")]
        line += [fmt(r["rope_cost"] * 100 if r.get("rope_cost") is not None else None, "+.1f")] if both else []
        line += [fmt(r.get("peak_mem_gib"), ".2f"), fmt(r.get("attn_params_mb"), ".2f"),
                 "" if ok else r["error"].replace("|", "/")]
        body.append(line)
    pos = {"off": "learned positions", "on": "RoPE", "both": "learned positions and RoPE"}[a.get("rope", "off")]
    head = (f"# Training step, {'tiny model' if a['tiny'] else 'GPT-2 124M'} ({pos}, bias=False)\n\n"
            + run_line(info) + "\n\n" + f"`{info['command']}`\n\n")
    md = head + markdown_table(headers, body)
    if both:
        md += ("\n\nRoPE cost % = total ms with RoPE / total ms of the same variant and shape with learned "
               "positions − 1 (MLA: decoupled RoPE, Tucker: latent RoPE).")
    if a.get("nanogpt"):
        md += ("\n\nvs nanoGPT = our tokens/s over nanoGPT's bench.py at the same shape, both timed nanoGPT's "
               "way (wall clock, loss read back every iteration; see below).")
        if nanogpt:
            md += "\n\n" + nanogpt_section(nanogpt, rows, flops_mha, a["peak_tflops"])
    if any(r.get("loop_event_ms") is not None for r in rows):
        md += "\n\n" + loop_section(rows, both)
    return md + clock_section(rows) + (profiles_section(rows) if profiles else "")


def clock_section(rows) -> str:
    """The GPU's SM clock (median and lowest, MHz) and power (median, W) over each row's timed loops, from
    nvidia-smi every 50 ms (scripts/gpu_clock.py); empty where none was read."""
    loops = ("timed", "loop", "loop2")
    body = []
    for r in rows:
        c = r.get("clock") or {}
        if not any(c.get(k) for k in loops):
            continue
        cell = lambda w: (f"{w['sm_mhz']:.0f} ({w['sm_mhz_min']:.0f}), {w['power_w']:.0f} W" if w else "—")  # noqa: E731
        body.append([r["label"], r["shape"] + (f" {r['pos']}" if r.get("pos") else ""), *[cell(c.get(k)) for k in loops]])
    if not body:
        return ""
    return ("\n\n## GPU clock while timed\n\nSM clock, median (lowest) MHz, and median power over each timed loop "
            "(nvidia-smi every 50 ms): the event-timed iterations of the table (`timed`), the loop timed nanoGPT's "
            "way and the second such loop. The H200's clock is 1,980 MHz unloaded; at its 700 W limit it drops with "
            "the load, so rows that draw less power run at a higher clock.\n\n"
            + markdown_table(["variant", "shape", "timed", "loop", "2nd loop"], body))


def loop_section(rows, both: bool) -> str:
    """Each row timed nanoGPT's way, and where that loop's time goes."""
    headers = ["variant", "shape"] + (["pos"] if both else []) + [
        "events ms", "loop ms", "its median, max ms", "2nd loop ms", "2nd loop events ms", "idle ms", "host ms in the step call"]
    body = []
    for r in rows:
        if r.get("loop_event_ms") is None:
            continue
        body.append([r["label"], r["shape"]] + ([r.get("pos", "")] if both else []) + [
            fmt(r.get("total_ms"), ".2f"), fmt(r["loop_ms"], ".2f"),
            (f"{r['loop_ms_median']:.2f}, {r['loop_ms_max']:.2f}" if r.get("loop_ms_median") is not None else "—"),
            fmt(r.get("loop2_ms"), ".2f"),
            fmt(r["loop_event_ms"], ".2f"),
            fmt(r["loop2_ms"] - r["loop_event_ms"] if r.get("loop2_ms") is not None else None, ".2f"),
            fmt(r.get("loop_host_ms"), ".3f")])
    return ("## Timed nanoGPT's way: where the loop's time goes\n\n"
            f"events ms: the row's median step by CUDA events, the host running ahead (the table above). loop ms: wall "
            f"clock per iteration of {NANOGPT_STEPS} iterations with the loss read back after each (nanoGPT's bench.py), and "
            "the median and the longest of those iterations. "
            "A second such loop, its wall clock (2nd loop ms) and its mean step by CUDA events (2nd loop events ms); "
            "idle ms = their difference, the GPU's wait per iteration between one step's end and the next step's first "
            "event (the read-back and the host's time before the step call); a launch that keeps the GPU waiting "
            "after that event shows as 2nd loop events ms above events ms; "
            "host ms in the step call: the host's time from the call to its return (launching the step, or copying "
            "into the graph and replaying it).\n\n" + markdown_table(headers, body))


def run_line(info) -> str:
    a = info["args"]
    pre = f", caches filled by {a['precompile']} precompile workers" if a.get("precompile") else ""
    accum = f", {a['grad_accum']} micro-steps per iteration" if a.get("grad_accum", 1) > 1 else ""
    return (f"{info['date']} on {info['gpu'] or info['device']}, torch {info['torch']}, "
            f"compile={a['compile']}{' (' + a['compile_scope'] + pre + ')' if a['compile'] else ''}, "
            f"{'mode ' + a['compile_mode'] + ', ' if a['compile'] and a.get('compile_mode', 'default') != 'default' else ''}"
            f"{'inductor options ' + json.dumps(info['inductor_options']) + ', ' if a['compile'] and info.get('inductor_options') else ''}"
            f"{'the whole iteration replayed from one CUDA graph (--graph_step), ' if a.get('graph_step') else ''}"
            f"bf16 autocast, "
            f"{'bf16 matrices with float32 masters in master_adamw.MasterAdamW (--master_weights)' if a.get('master_weights') else 'fused AdamW'}"
            f"{accum}, SDPA backend {a['sdpa_backend']}"
            f"{', knobs ' + ' '.join(a['knob']) if a.get('knob') else ''}"
            f"{', activation checkpointing' if a.get('act_ckpt') else ''}"
            f"{', loss head in chunks of %d tokens' % a['loss_chunk'] if a.get('loss_chunk') else ''}; "
            f"median of {a['iters']} iterations after {a['warmup']} warm-up; "
            f"MFU against {a['peak_tflops']:g} TFLOP/s.")


def render_llama(rows, info, profiles: bool = True) -> str:
    a = info["args"]
    paper = llama_paper_iter_s()
    headers = ["method", "shape", "accum", "fwd ms", "bwd ms", "opt ms", "iter ms", "iter ×GQA-8", "iter ×MHA",
               "paper ×GQA-8", "tokens/s", "MFU %", "peak GiB", "attn params M", "note"]
    body = []
    for r in rows:
        ok = r["status"] == "ok"
        paper_ratio = paper[r["variant"]] / paper["gqa8"] if r["variant"] in paper and "gqa8" in paper else None
        body.append([r["label"], r["shape"], r.get("grad_accum", 1),
                     fmt(r.get("fwd_ms"), ".1f"), fmt(r.get("bwd_ms"), ".1f"), fmt(r.get("opt_ms"), ".2f"),
                     fmt(r.get("total_ms"), ".1f"), fmt(r.get("total_ms_vs_gqa8"), ".3f"),
                     fmt(r.get("total_ms_vs_mha"), ".3f"), fmt(paper_ratio, ".3f"), fmt(r.get("tokens_per_s"), ",.0f"),
                     fmt(r["mfu"] * 100 if ok else None, ".1f"), fmt(r.get("peak_mem_gib"), ".2f"),
                     fmt(r["attn_params"] / 1e6 if r.get("attn_params") else None, ".1f"),
                     "" if ok else r["error"].replace("|", "/")])
    model = "tiny LLaMA-style model" if a["tiny"] else SUITES["llama1b"].model
    head = (f"# Training iteration, {model}, N = sequence length (the paper's tab:owt2_llama1b_timing, training "
            f"columns)\n\n" + run_line(info) + "\n\n" + f"`{info['command']}`\n\n")
    note = ("\n\nOne iteration = `accum` micro-steps of B x N tokens (forward + backward each) and one optimizer "
            "step; the paper's iteration is 128 x 4096 tokens (micro-batch x accumulation over 4 H100s, GPT-NeoX), "
            "so compare ratios, not ms: `paper ×GQA-8` is its train-iteration time over GQA-8's. attn params M = "
            "millions of attention parameters, the paper's unit.")
    loops = ("\n\n" + loop_section(rows, False)) if any(r.get("loop_event_ms") is not None for r in rows) else ""
    return (head + markdown_table(headers, body) + note + loops + clock_section(rows)
            + (profiles_section(rows) if profiles else ""))


def profiles_section(rows) -> str:
    parts = [render_profile(r["profile"], f"{r['label']} at {r['shape']}" + (f" ({r['pos']})" if r.get("pos") else ""))
             for r in rows if r.get("profile")]
    return ("\n\n## Profiles\n\n" + "\n\n".join(parts)) if parts else ""


def add_common_args(p, name: str) -> None:
    """Options both benchmarks share (bench_decode.py imports this)."""
    p.add_argument("--sdpa_backend", default="auto", choices=SDPA_BACKENDS)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="a tiny model (CPU smoke test)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--out_dir", default=None, help="write NAME.md and NAME.json here")
    p.add_argument("--name", default=name, help="file name stem of the outputs (e.g. one per backend)")
    p.add_argument("--blas", default="default", choices=BLAS_CHOICES,
                   help="torch.backends.cuda.preferred_blas_library for the run: 'default' leaves torch's choice "
                        "(cuBLAS), 'cublaslt' routes aten's matmuls (inductor's extern mm among them) to cuBLASLt")


BLAS_CHOICES = ("default", "cublas", "cublaslt")
# whose upper-case constants bench_train's --knob may set
TRAIN_KNOB_MODULES = ("master_adamw", "fused_gelu", "fused_mla_rope")


def set_module_knobs(pairs, modules: Sequence[str]) -> dict:
    """--knob [MODULE.]NAME=VALUE: a module constant (an upper-case name it defines) of one of `modules` (the first
    where MODULE is left out), the value a Python literal. An unknown module or name or a value that is not a literal
    exits naming it. Returns {name as given: value}."""
    import ast
    import importlib
    done = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        mod_name, dot, name = name.strip().rpartition(".")
        mod_name = mod_name if dot else modules[0]
        if mod_name not in modules:
            raise SystemExit(f"--knob {pair!r}: the module must be one of {', '.join(modules)}")
        module = importlib.import_module(mod_name)
        if not sep or not name.isupper() or not hasattr(module, name):
            known = sorted(n for n in vars(module) if n.isupper() and not n.startswith("_"))
            raise SystemExit(f"--knob {pair!r}: expected [MODULE.]NAME=VALUE with NAME one of {mod_name}'s "
                             f"{', '.join(known)}")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            raise SystemExit(f"--knob {pair!r}: the value must be a Python literal (e.g. True, 4, 'q_base')")
        setattr(module, name, value)
        done[f"{mod_name}.{name}" if dot else name] = value
    return done


def add_knob_arg(p) -> None:
    """bench_train's and loop_gap's --knob (bench_decode has its own, over the decode modules)."""
    p.add_argument("--knob", action="append", default=[], metavar="MODULE.NAME=VALUE",
                   help="set a tuning constant of master_adamw (the default module), fused_gelu or fused_mla_rope for "
                        "the run (a Python literal; repeatable), e.g. --knob TENSORS_PER_LAUNCH=16 (with "
                        "--master_weights), --knob fused_mla_rope.BACKEND='torch'")


def apply_blas(choice: str) -> None:
    """--blas: the BLAS library aten's CUDA matmuls use in this process (nothing for 'default')."""
    if choice not in BLAS_CHOICES:
        raise ValueError(f"--blas must be one of {BLAS_CHOICES}, got {choice!r}")
    if choice != "default":
        torch.backends.cuda.preferred_blas_library(choice)


# ----------------------------------------------------------------------------------------
# Time budget and parallel precompilation


class Budget:
    """Seconds since the start against --time_budget (None: unlimited)."""

    def __init__(self, seconds):
        self.seconds, self.t0 = seconds, time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self):
        return None if self.seconds is None else self.seconds - self.elapsed()

    def allows(self, need_s: float) -> bool:
        return self.seconds is None or self.elapsed() + need_s <= self.seconds


def run_workers(commands, deadline_s, env=None, logs=None):
    """Start every command (in its own process group, cwd the repository; output to the open file
    logs[i], else discarded) and wait for all, at most until deadline_s (None: no limit); the ones
    still running then are stopped, their group with them. Returns (exit code or None if stopped,
    seconds) per command."""
    start = time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True,
                              stdout=logs[i] if logs else subprocess.DEVNULL, stderr=subprocess.STDOUT)
             for i, cmd in enumerate(commands)]
    ended = [None] * len(procs)
    while any(e is None for e in ended):
        for i, proc in enumerate(procs):
            if ended[i] is None and proc.poll() is not None:
                ended[i] = time.perf_counter() - start
        if deadline_s is not None and time.perf_counter() - start > deadline_s:
            break
        time.sleep(0.2)
    results = []
    for i, proc in enumerate(procs):
        if ended[i] is None:  # past the deadline: the worker and the compile workers it started
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
            results.append((None, time.perf_counter() - start))
        else:
            results.append((proc.returncode, ended[i]))
    return results


def precompile(argv, n: int, deadline_s):
    """--precompile n: n copies of this command with --warm_worker i/n, each compiling its share of
    the rows (and nanoGPT runs) so that the measuring pass finds inductor's caches warm. Each
    worker's inductor gets cpus/n compile threads (not part of the cache key)."""
    threads = max(1, (os.cpu_count() or 1) // n)
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    commands = [[sys.executable, "-m", MODULE, *argv, "--warm_worker", f"{i}/{n}"] for i in range(n)]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        logs = [open(Path(tmp) / f"worker{i}.log", "w+") for i in range(n)]
        results = run_workers(commands, deadline_s, env, logs)
        tails = []
        for log in logs:  # what each worker did (the lines it printed per task; a traceback if it died)
            log.seek(0)
            tails.append([line.rstrip() for line in log.readlines() if line.startswith("[warm") or "Error" in line][-20:])
            log.close()
    return {"workers": n, "compile_threads_each": threads, "wall_s": time.perf_counter() - t0,
            "exit_codes": [rc for rc, _ in results], "worker_s": [s for _, s in results], "log": tails}


# ----------------------------------------------------------------------------------------
# main


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="gpt2", choices=tuple(SUITES),
                   help="gpt2: the GPT-2 124M variants below; llama1b: the paper's LLaMA-3 1B rows (RoPE, "
                        "their config files, N = the shapes' T, default 2x4096)")
    p.add_argument("--variants", default="all",
                   help="comma-separated ids or 'all', run in this order (put the important ones first under "
                        "--time_budget): " + ", ".join(v.id for v in VARIANTS)
                        + " (llama1b: the ids of scripts/paper_tables.py's llama1b rows)")
    p.add_argument("--shapes", default=None,
                   help="comma-separated BxT (default 12x1024,64x256; llama1b: 2x4096; --tiny: 4x64 / 2x32)")
    p.add_argument("--rope", nargs="?", const="on", default="off", choices=("off", "on", "both"),
                   help="positions: 'off' learned (default), 'on' (or bare --rope) RoPE (MLA: decoupled), "
                        "'both' a row with each; llama1b is always RoPE")
    p.add_argument("--grad_accum", type=int, default=1,
                   help="micro-steps (forward + backward) per iteration, one optimizer step (train.py's "
                        "gradient_accumulation_steps)")
    p.add_argument("--loss_chunk", type=int, default=0, metavar="N",
                   help="the loss head in chunks of N tokens (GPTConfig.loss_chunk_tokens: no full float32 logits)")
    p.add_argument("--act_ckpt", action="store_true",
                   help="activation checkpointing (GPTConfig.activation_checkpointing) for rows that would not fit")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model (default: on for cuda, off for cpu)")
    p.add_argument("--compile_mode", default="default",
                   choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
                   help="torch.compile's mode (train.py's compile_mode key): 'reduce-overhead' adds CUDA graphs "
                        "(launch-bound steps such as Tucker's)")
    p.add_argument("--graph_step", action="store_true",
                   help="train.py's graph_step: capture the whole iteration (forward, backward, AdamW) in one CUDA "
                        "graph and replay it (graph_step.py; with --compile_mode default or max-autotune-no-cudagraphs)")
    add_knob_arg(p)
    p.add_argument("--master_weights", action="store_true",
                   help="train.py's master_weights: the model's matrices in bf16 with float32 masters in "
                        "master_adamw.MasterAdamW (no autocast weight casts; AdamW reads the bf16 gradients, or "
                        "their float32 sum over --grad_accum micro-steps, and writes the bf16 copy)")
    p.add_argument("--inductor", action="append", default=[], metavar="KEY=VALUE",
                   help="an inductor option over train.py's (model.train_compile_options), e.g. "
                        "triton.mix_order_reduction=True; repeatable; VALUE True, False, an integer or a string")
    p.add_argument("--compile_scope", default="model", choices=("model", "blocks"),
                   help="'model': torch.compile(model) as train.py (default); 'blocks': compile each Block "
                        "(one shared graph: much faster to compile; embeddings, lm_head and loss stay eager)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations (default 50, llama1b 10; --tiny: 3)")
    p.add_argument("--warmup", type=int, default=None,
                   help="warm-up iterations, compile included (default 20, llama1b 3; --tiny: 1)")
    p.add_argument("--peak_tflops", type=float, default=790.0, help="bf16 matmul rate measured on the H200")
    p.add_argument("--nanogpt", default=None, metavar="DIR",
                   help="a copy of nanoGPT (../shared/peers/nanogpt) outside the project: run its bench.py at each "
                        "shape before and after our rows and report our tokens/s over its (gpt2 suite, CUDA)")
    p.add_argument("--loop", action="store_true",
                   help="time every row nanoGPT's way (loss read back each iteration: loop_ms, and the loop's GPU "
                        "and host time: loop_event_ms, loop_host_ms) without running nanoGPT (--nanogpt does it too)")
    p.add_argument("--profile", default=None, metavar="VARIANTS",
                   help="comma-separated variant ids: profile 5 more iterations of their rows (every shape and "
                        "positions setting) and report the top CUDA kernels (--profile_top of them)")
    p.add_argument("--profile_top", type=int, default=PROFILE_TOP, metavar="N",
                   help=f"kernels listed per profile, by total time (default {PROFILE_TOP})")
    p.add_argument("--time_budget", type=float, default=None, metavar="S",
                   help="seconds for the whole run: a row that would not fit (judged by the slowest of the last "
                        "three rows, keeping time for nanoGPT's second run) is reported as skipped")
    p.add_argument("--precompile", type=int, default=0, metavar="N",
                   help="first compile every row in N parallel worker processes (fills inductor's on-disk "
                        "caches; each holds one model on the GPU at a time), then measure one row at a time")
    p.add_argument("--warm_worker", default=None, help=argparse.SUPPRESS)  # i/n: a --precompile worker
    add_common_args(p, name="bench_train")
    return p


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    explicit_argv = argv is not None
    argv = list(sys.argv[1:] if argv is None else argv)
    suite = SUITES[args.suite]
    llama = args.suite == "llama1b"

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --device=cpu --tiny for a smoke test")
    apply_blas(args.blas)  # ours only: nanoGPT's bench.py runs in its own process with torch's default
    set_module_knobs(args.knob, TRAIN_KNOB_MODULES)  # ours only, as --blas
    if args.nanogpt:
        if device.type != "cuda":
            raise SystemExit("--nanogpt needs a CUDA device: nanoGPT's bench.py times bf16 on the GPU "
                             "(torch.cuda.synchronize) and cannot run on the CPU")
        if llama or args.tiny:
            raise SystemExit("--nanogpt compares GPT-2 124M: use it with --suite gpt2, without --tiny")
        args.nanogpt = str(check_nanogpt_folder(args.nanogpt))
    if args.act_ckpt and not has_activation_checkpointing():
        raise SystemExit("--act_ckpt needs GPTConfig.activation_checkpointing in model.py, which this checkout "
                         "does not have")
    if llama and args.rope == "off":
        args.rope = "on"  # the LLaMA table is RoPE only (latent RoPE for MLA and Tucker, from the config files)
    elif llama and args.rope != "on":
        raise SystemExit("--suite llama1b is RoPE only (the paper's table): leave --rope out")
    if args.grad_accum < 1:
        raise SystemExit("--grad_accum must be >= 1")
    if args.graph_step:
        why_not = check_graph_step(device, "bfloat16", False, args.compile is not False, args.compile_mode,
                                   args.act_ckpt)
        if why_not:
            raise SystemExit(why_not.replace("graph_step=True", "--graph_step").replace("compile_mode=", "--compile_mode "))
    if args.precompile < 0:
        raise SystemExit("--precompile must be >= 0")
    if args.name == "bench_train" and llama:
        args.name = "bench_train_llama1b"
    args.compile = (device.type == "cuda") if args.compile is None else args.compile
    args.iters = args.iters or (3 if args.tiny else suite.iters)
    args.warmup = max(1, args.warmup if args.warmup is not None else (1 if args.tiny else suite.warmup))
    args.shapes = args.shapes or (suite.tiny_shapes if args.tiny else suite.shapes)
    shapes = parse_shapes(args.shapes)
    available = llama_variants() if llama else VARIANTS
    variants = select_variants(args.variants, available)
    positions = {"off": [False], "on": [True], "both": [False, True]}[args.rope]
    profiled = set()
    if args.profile:
        profiled = {v.id for v in select_variants(args.profile, available)}
        missing = profiled - {v.id for v in variants}
        if missing:
            raise SystemExit(f"--profile {', '.join(sorted(missing))}: not among --variants")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # as train.py (only fp32 leftovers are affected)
        torch.backends.cudnn.allow_tf32 = True

    # Run order: variant by variant (a --time_budget cut drops whole variants from the end of the
    # list); display order: by shape, positions, then variant.
    jobs = [(v, b, t, rope) for v in variants for b, t in shapes for rope in positions]
    order = {v.id: i for i, v in enumerate(variants)}

    def sort_key(r):
        return (shapes.index((r["batch_size"], r["seq_len"])), r.get("pos") == "rope", order[r["variant"]])

    if args.warm_worker:
        return warm_worker(args, jobs, shapes, device)

    budget = Budget(args.time_budget)
    info = run_info(args, device, argv if explicit_argv else None, MODULE if explicit_argv else None)
    if args.compile:  # train.py's inductor options with --inductor's over them (an unknown key stops here)
        try:
            info["inductor_options"] = train_compile_options(args.compile_mode, inductor_overrides(args.inductor))
        except ValueError as e:
            raise SystemExit(f"--inductor: {e}")
    print(f"{info['command']}\n{info['gpu'] or info['device']}, torch {info['torch']}; {len(jobs)} rows"
          f"{f', nanoGPT at {len(shapes)} shapes x 2' if args.nanogpt else ''}", flush=True)
    flops_mha = {}
    if args.nanogpt:
        mha = next(v for v in VARIANTS if v.id == "mha")
        for b, t in shapes:
            with torch.device("meta"):
                flops_mha[f"{b}x{t}"] = GPT(model_config(mha, tiny=args.tiny, rope=False, block_size=t)).flops_per_token(t)

    if args.precompile and args.compile:
        deadline = None if args.time_budget is None else 0.5 * args.time_budget
        print(f"precompile: {args.precompile} workers for {len(jobs)} rows"
              f"{f' + {len(shapes)} nanoGPT runs' if args.nanogpt else ''}"
              f"{f' (stopped after {deadline:.0f} s)' if deadline else ''}", flush=True)
        info["precompile"] = precompile(argv, args.precompile, deadline)
        print(f"precompile: done in {info['precompile']['wall_s']:.0f} s, exit codes "
              f"{info['precompile']['exit_codes']}", flush=True)
    elif args.precompile:
        print("precompile: nothing to compile (--no-compile), skipped", flush=True)
        info["precompile"] = None

    nanogpt = {f"{b}x{t}": [] for b, t in shapes} if args.nanogpt else {}
    # the GPU's SM clock and power while each row is timed (an H200 at its power limit: scripts/gpu_clock.py)
    clocks = contextlib.ExitStack()
    clock_log = clocks.enter_context(ClockLog(interval_ms=50)) if device.type == "cuda" else None

    def nanogpt_runs(when):
        for b, t in shapes:
            run = {"when": when}
            t0 = time.perf_counter()
            left = budget.left()
            try:
                if left is not None and left < 30:
                    raise TimeoutError(f"time budget: {left:.0f} s left")
                release(device)
                run.update(run_nanogpt(Path(args.nanogpt), b, t, timeout=min(600, left) if left else 600))
                run["status"] = "ok"
            except Exception as e:
                run.update(status="error", error=short_error(e), wall_s=time.perf_counter() - t0)
            nanogpt[f"{b}x{t}"].append(run)
            msg = (f"{run['ms_per_iter']:.2f} ms/iter, {run['tokens_per_s']:,.0f} tok/s" if run["status"] == "ok"
                   else run["error"])
            print(f"[{b}x{t}] nanoGPT bench.py ({when}) {msg}  ({run['wall_s']:.0f} s)", flush=True)

    if args.nanogpt:
        nanogpt_runs("before")
    reserve = sum(x.get("wall_s", 0) for runs in nanogpt.values() for x in runs)  # for the second nanoGPT pass

    rows, done, markdown = [], [], ""
    for v, batch_size, seq_len, rope in jobs:
        row = {"variant": v.id, "label": v.label, "shape": f"{batch_size}x{seq_len}", "batch_size": batch_size,
               "seq_len": seq_len, "grad_accum": args.grad_accum}
        if len(positions) > 1 or not llama:
            row["pos"] = "rope" if rope else "learned"
        profile = v.id in profiled  # every positions setting: the RoPE rows too (RoPE cost is a target)
        # what the next row will take: the slowest of the last three measured (rows found in the
        # precompiled caches are much faster than cold ones; the order of rows is the run order)
        expected = max((r["wall_s"] for r in done[-3:]), default=0.0)
        t0 = time.perf_counter()
        if not budget.allows(expected + reserve):
            row.update(status="skipped", error=f"skipped: time budget ({budget.left():.0f} s left, a row took "
                                               f"up to {expected:.0f} s)")
        else:
            try:
                reset_peak_memory(device)
                with sdpa_context(args.sdpa_backend):
                    row.update(bench_one(v, batch_size, seq_len, args, device, rope=rope, profile=profile))
                row.update(status="ok", error=None)
                if clock_log is not None and clock_log.available:
                    row["clock"] = {k: clock_log.window(*w) for k, w in row.get("wall_times", {}).items()}
            except Exception as e:  # OOM, unsupported backend, compile failure: report, go on
                traceback.print_exc()
                row.update(status="error", error=short_error(e))
            release(device, dynamo=args.compile)
        row["wall_s"] = time.perf_counter() - t0
        if row["status"] == "ok":
            done.append(row)
        rows.append(row)
        rows.sort(key=sort_key)
        finish(rows, args, suite, nanogpt)
        if row["status"] == "ok":
            cache = row.get("compile_cache", {})
            hits = (f", caches: fx {cache['fxgraph_cache_hit']} hit/{cache['fxgraph_cache_miss']} miss, aot "
                    f"{cache['autograd_cache_hit']} hit/{cache['autograd_cache_miss']} miss" if args.compile and cache else "")
            first = f", first step {row['first_step_s']:.1f} s" if "first_step_s" in row else ""
            msg = (f"total {row['total_ms']:.2f} ms, {row['tokens_per_s']:,.0f} tok/s, MFU {row['mfu'] * 100:.1f}%"
                   f"{first}{hits}")
        else:
            msg = row["error"]
        print(f"[{row['shape']}{' ' + row['pos'] if 'pos' in row else ''}] {v.id:24s} {msg}  ({row['wall_s']:.0f} s)",
              flush=True)
        markdown = render(rows, info, nanogpt, flops_mha)
        write_report(args.out_dir, args.name, markdown, {**info, "rows": rows, "nanogpt": nanogpt})

    if args.nanogpt:
        nanogpt_runs("after")
        finish(rows, args, suite, nanogpt)
    clocks.close()
    info["wall_s"] = budget.elapsed()
    markdown = render(rows, info, nanogpt, flops_mha)
    write_report(args.out_dir, args.name, markdown, {**info, "rows": rows, "nanogpt": nanogpt})
    print("\n" + markdown, flush=True)
    if any(r.get("profile") for r in rows):  # the tables once more without the profiles: the end of the log
        print("\n" + render(rows, info, nanogpt, flops_mha, profiles=False), flush=True)
    print(f"\n(wall time {info['wall_s']:.0f} s)", flush=True)
    return rows


def finish(rows, args, suite, nanogpt):
    """All derived columns, recomputed from the rows so far."""
    group = ["shape", "pos"] if args.rope == "both" else ["shape"]
    for ref in suite.references:
        add_ratios(rows, ["total_ms", "tokens_per_s", "peak_mem_gib"], group, reference=ref)
    if args.rope == "both":
        add_rope_cost(rows)
    if nanogpt:
        add_nanogpt_ratios(rows, nanogpt)


def warm_worker(args, jobs, shapes, device):
    """A --precompile worker: its share of the nanoGPT runs and rows, one step each beyond the
    compile, nothing written; errors (an OOM beside the other workers) only cost a warm cache."""
    i, n = (int(x) for x in args.warm_worker.split("/"))
    args.iters, args.warmup = 1, 1
    folder, args.nanogpt = args.nanogpt, None  # no nanoGPT-style loop in the rows
    tasks = [("nanogpt", b, t) for b, t in shapes] if folder else []
    tasks += [("row", job) for job in jobs]
    done = []
    for k, task in enumerate(tasks):
        if k % n != i:
            continue
        t0 = time.perf_counter()
        try:
            if task[0] == "nanogpt":
                what = f"nanoGPT {task[1]}x{task[2]}"
                run_nanogpt(Path(folder), task[1], task[2], timeout=600)
            else:
                v, b, t, rope = task[1]
                what = f"{v.id} {b}x{t}{' rope' if rope else ''}"
                with sdpa_context(args.sdpa_backend):
                    bench_one(v, b, t, args, device, rope=rope)
            status = "ok"
        except Exception as e:
            status = short_error(e)
        release(device, dynamo=args.compile)
        done.append((what, status))
        print(f"[warm {i}/{n}] {what}: {status} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return done


if __name__ == "__main__":
    main()

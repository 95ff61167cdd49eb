"""
The decode-attention kernel alone (decode_attention.py): time per call against the bytes it must
read, for the shapes of Tucker, MQA and MLA decoding, and how the time moves with the kernel's knobs.

    python -m scripts.bench_decode_kernel --out_dir $OUT              # every group below (~130 settings, each compiles once)
    python -m scripts.bench_decode_kernel --quick --out_dir $OUT      # the module's defaults only, every case
    python -m scripts.bench_decode_kernel --groups rope --cases T64r,T128r --warps 2 --rope_fp32 false

What one measurement is. One call of `decode_attention.decode_attention(q, k, v, length,
scale=Dk**-0.5, rope=..., backend="triton")`: the split kernel and the combine kernel, one new
token per sequence attending to a bf16 cache filled with random-normal values (never zeros), every
sequence at the same `length`. The call is run once eagerly (compiling the kernels for the knob
values set), once on a side stream, then `--steps` calls (20) are captured in one CUDA graph; the
graph is replayed once, then `--reps` times (7), each replay bracketed by CUDA events. The time of
one call is a replay's time / steps, and the table gives the median over the replays. Every call
in the graph does the same work (same cache, same length): what one decode step's attention
of one layer costs, without launch overhead.

The floor. A call must at least read the valid part of the cache once:
    bytes = B * nG * length * Dk * 2   (keys; shared K/V, v = k or a view k[..., :Dv], read once)
          + B * nG * length * Dv * 2   (values, only when they are a separate tensor)
(bf16: 2 bytes; the queries, tables, workspaces and outputs are small and not counted.) The
copy rate is measured first: `y.copy_(x)` of 2**29 bf16 values (1 GiB) on the device, 3 warm-up
copies, then 10 copies between two events, each counted as 2 x 1 GiB moved (read + write):
4.24-4.26 TB/s on the H200. "% of copy" = bytes / time / copy rate: the fraction of the
bandwidth a plain copy reaches. A kernel that only reads can pass 100% (reads alone stream faster
than a read/write mix: sweep 1 in results/bench/kernel has GQA and MHA at 103%).

Cases (bf16, random q/k/v; `length` = L unless said; `v` same: v is k; view: v = k[..., :Dv];
separate: its own tensor):

    key    what                                       B   nH  nG  L      length  Dk   Dv   RoPE  v         MB read
    T64r   Tucker r3=64, nH=12, shared K/V, RoPE      32  12  1   16384  16384   64   64   yes   same       67.1
    T64    the same without RoPE                      32  12  1   16384  16384   64   64   no    same       67.1
    T64kv  Tucker [8,64,64], separate k and v         32  12  1   16384  16384   64   64   no    separate  134.2
    T128r  Tucker r3=128, nH=16, shared K/V, RoPE     32  16  1   16384  16384   128  128  yes   same      134.2
    T128   the same without RoPE                      32  16  1   16384  16384   128  128  no    same      134.2
    MQA    MQA, separate k and v                      32  32  1   16384  16384   128  128  no    separate  268.4
    MLA    MLA absorbed, decoupled [128 | 32 rope]    32  16  1   16384  16384   160  128  no    view      167.8
    B1     T64r at batch 1                            1   12  1   16384  16384   64   64   yes   same        2.1
    cap    T64r in a cache of capacity 32k, 16k valid 32  12  1   32768  16384   64   64   yes   same       67.1
    GQA    GQA nG=8 (sweep 1 only; not in --cases by default)  32  32  8  16384  16384  128  128  no  separate  2147.5
    MHA    MHA nH=12 (sweep 1 only; not in --cases by default) 32  12  12 16384  16384   64   64  no  separate  1610.6

(MLA: the cached latent row is [dcK=128 | 32 decoupled RoPE dims], its value the first 128
columns; the rope part is not rotated here, the case times the 160-wide read. GQA and MHA: shapes
of sweep 1's "gqa nG=8 nH=32 D=128" and "mha nH=12 D=64" rows, B and L as the others: their
bytes / time reproduce that file's TB/s.)

Groups (--groups; each knob value is set on the module for the call and restored after, and
compiles once; "base" is whatever the module's defaults are when it runs, recorded in the JSON):

    base        every selected case at the module's defaults
    sdpa        every selected case with backend="sdpa" (the fallback: rotates the whole cache for RoPE)
    split_only  T64r, T64, T64kv, MQA, B1 with the combine kernel replaced by a no-op: the split kernel alone
    rope        T64r, T128r, B1, cap: ROPE_MODE (--rope_modes) x ROPE_FP32 (--rope_fp32) x NUM_WARPS (--warps)
    tiles       T64, T64kv, T128, MQA, MLA: NUM_WARPS (--warps) x BLOCK_N (--block_n) x NUM_STAGES (--stages)
                (MLA's padded key row is 160 > 128 wide: the kernel uses BLOCK_N_WIDE there, so BLOCK_N
                does not change it and its BLOCK_N lines are repeats)
    splits      T64r, T64, T64kv, MQA, MLA: CTAS_PER_SM (--ctas) x MIN_SPLIT_TOKENS (--min_split, also
                MIN_SPLIT_TOKENS_WIDE: the minimum of every case)
    tucker      tucker_decode_attention (query and output cores fused, RoPE, shared K/V, length --tucker_len)
                for each --tucker config B:nH:r2:r3:p2, TUCKER_QCORE in --qcores, against the composed
                step (einsum for the query cores, rotation, decode_attention, einsum for the output
                cores); the fused step with its combine replaced by a no-op; max |fused - composed|.
                Bytes: B * length * r3 * 2.

Each line: case, settings, time per call in us, % of copy, and the split kernel's registers per
thread and spilled registers (Triton's compiled kernel: decode_attention.last_launch). The
settings columns of sweep 2 (results/bench/kernel/sweep_2.*) are the same strings, except that
its "base" used that day's defaults (NUM_WARPS=4, ROPE_FP32=True).

On a machine without CUDA (or without Triton) the script stops with a one-line message.
"""

import argparse
import itertools
import json
import math
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import torch

if __name__ == "__main__" and not __package__:  # run as a file, the repository's modules are not importable
    sys.exit("run from the repository root as a module: python -m scripts.bench_decode_kernel ...")

import decode_attention as da  # noqa: E402
from scripts.bench_train import run_info  # noqa: E402

DTYPE = torch.bfloat16  # of every tensor timed (the bytes helpers count 2 bytes a value)
BYTES_BF16 = 2
COPY_NUMEL = 2 ** 29  # bf16 values copied to measure the copy rate (1 GiB)


@dataclass(frozen=True)
class Case:
    key: str
    what: str
    B: int
    nH: int
    nG: int
    L: int  # cache capacity (rows allocated)
    Dk: int
    Dv: int
    rope: bool
    kv: str  # 'same' (v is k), 'view' (v = k[..., :Dv]) or 'separate'
    length: Optional[int] = None  # valid rows (None: L)

    @property
    def n(self) -> int:
        return self.L if self.length is None else self.length


CASES = {c.key: c for c in (
    Case("T64r", "tucker r3=64 nH=12 shared rope", 32, 12, 1, 16384, 64, 64, True, "same"),
    Case("T64", "tucker r3=64 nH=12 shared", 32, 12, 1, 16384, 64, 64, False, "same"),
    Case("T64kv", "tucker r3=64 nH=12 k,v", 32, 12, 1, 16384, 64, 64, False, "separate"),
    Case("T128r", "tucker r3=128 nH=16 shared rope", 32, 16, 1, 16384, 128, 128, True, "same"),
    Case("T128", "tucker r3=128 nH=16 shared", 32, 16, 1, 16384, 128, 128, False, "same"),
    Case("MQA", "mqa nH=32 D=128 k,v", 32, 32, 1, 16384, 128, 128, False, "separate"),
    Case("MLA", "mla dec. nH=16 [128|32] v=k[:128]", 32, 16, 1, 16384, 160, 128, False, "view"),
    Case("B1", "tucker r3=64 rope B=1", 1, 12, 1, 16384, 64, 64, True, "same"),
    Case("cap", "tucker r3=64 rope cap 32k len 16k", 32, 12, 1, 32768, 64, 64, True, "same", length=16384),
    Case("GQA", "gqa nG=8 nH=32 D=128", 32, 32, 8, 16384, 128, 128, False, "separate"),
    Case("MHA", "mha nH=12 D=64", 32, 12, 12, 16384, 64, 64, False, "separate"),
)}
DEFAULT_CASES = ("T64r", "T64", "T128r", "T128", "MQA", "MLA", "B1", "cap")
GROUPS = ("base", "sdpa", "split_only", "rope", "tiles", "splits", "tucker")
GROUP_CASES = {  # the knob groups' cases (base and sdpa run every selected case)
    "split_only": ("T64r", "T64", "T64kv", "MQA", "B1"),
    "rope": ("T64r", "T128r", "B1", "cap"),
    "tiles": ("T64", "T64kv", "T128", "MQA", "MLA"),
    "splits": ("T64r", "T64", "T64kv", "MQA", "MLA"),
}
KNOBS = ("CTAS_PER_SM", "MIN_SPLIT_TOKENS", "MIN_SPLIT_TOKENS_WIDE", "WIDE_GROUP", "MAX_SPLITS", "BLOCK_N",
         "BLOCK_N_WIDE", "NUM_WARPS", "NUM_STAGES", "ROPE_MODE", "ROPE_FP32", "COMBINE_TILE", "TUCKER_QCORE",
         "TUCKER_QCORE_TILE", "TUCKER_QCORE_BLOCK_J")


# ----------------------------------------------------------------------------------------
# Bytes and the floor (no GPU needed)


def cache_bytes(B: int, nG: int, n: int, Dk: int, Dv: int, kv: str, itemsize: int = BYTES_BF16) -> int:
    """Bytes a call must read: the n valid key rows of every (sequence, KV head), plus the value
    rows when v is its own tensor (shared K/V, kv 'same' or 'view', is read once)."""
    if kv not in ("same", "view", "separate"):
        raise ValueError(f"kv must be 'same', 'view' or 'separate', got {kv!r}")
    keys = B * nG * n * Dk * itemsize
    return keys + (B * nG * n * Dv * itemsize if kv == "separate" else 0)


def case_bytes(c: Case) -> int:
    return cache_bytes(c.B, c.nG, c.n, c.Dk, c.Dv, c.kv)


def tucker_bytes(B: int, r3: int, n: int, itemsize: int = BYTES_BF16) -> int:
    """The fused Tucker step reads its one shared latent cache (B, 1, n, r3) once."""
    return B * n * r3 * itemsize


def copy_bytes(numel: int = COPY_NUMEL, itemsize: int = BYTES_BF16) -> int:
    """Bytes one device-to-device copy of numel values moves: read once, written once."""
    return 2 * numel * itemsize


def floor_us(nbytes: int, rate: float) -> float:
    """The time to move nbytes at rate bytes/s, in us."""
    return nbytes / rate * 1e6


def fraction_of_copy(nbytes: int, us: float, rate: float) -> float:
    """bytes / time / copy rate: 1.0 = as fast as the copy."""
    return nbytes / (us * 1e-6) / rate


# ----------------------------------------------------------------------------------------
# Arguments


def _csv(s: str):
    return [x.strip() for x in s.split(",") if x.strip()]


def _ints(s: str):
    return [int(x) for x in _csv(s)]


def _bools(s: str):
    out = []
    for x in _csv(s):
        if x.lower() not in ("true", "false", "1", "0"):
            raise argparse.ArgumentTypeError(f"expected true/false, got {x!r}")
        out.append(x.lower() in ("true", "1"))
    return out


def _tucker_configs(s: str):
    out = []
    for x in _csv(s):
        parts = x.split(":")
        if len(parts) != 5:
            raise argparse.ArgumentTypeError(f"a Tucker config is B:nH:r2:r3:p2, got {x!r}")
        out.append(tuple(int(p) for p in parts))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=_csv, default=list(GROUPS), help=f"comma-separated, of {','.join(GROUPS)} (default all)")
    p.add_argument("--quick", action="store_true", help="only the module's default settings: --groups base")
    p.add_argument("--cases", type=_csv, default=list(DEFAULT_CASES),
                   help=f"comma-separated, of {','.join(CASES)} (default {','.join(DEFAULT_CASES)}); "
                        "the knob groups run those of their own cases that are selected")
    p.add_argument("--warps", type=_ints, default=[2, 4], help="NUM_WARPS values (rope, tiles)")
    p.add_argument("--block_n", type=_ints, default=[64, 128], help="BLOCK_N values (tiles)")
    p.add_argument("--stages", type=_ints, default=[3, 4], help="NUM_STAGES values (tiles)")
    p.add_argument("--rope_modes", type=_csv, default=["q_base", "k_angle", "rows"], help="ROPE_MODE values (rope)")
    p.add_argument("--rope_fp32", type=_bools, default=[True, False], help="ROPE_FP32 values (rope): true,false")
    p.add_argument("--ctas", type=_ints, default=[2, 4, 8], help="CTAS_PER_SM values (splits)")
    p.add_argument("--min_split", type=_ints, default=[256, 1024], help="MIN_SPLIT_TOKENS values (splits; "
                   "MIN_SPLIT_TOKENS_WIDE set alike)")
    p.add_argument("--qcores", type=_csv, default=["dot", "bcast"], help="TUCKER_QCORE values (tucker)")
    p.add_argument("--tucker", type=_tucker_configs, default=_tucker_configs("32:12:64:64:64,32:16:128:128:128,1:12:64:64:64"),
                   help="Tucker configs B:nH:r2:r3:p2 (tucker group)")
    p.add_argument("--tucker_len", type=int, default=16384, help="cached tokens of the Tucker group")
    p.add_argument("--steps", type=int, default=20, help="calls captured in one CUDA graph")
    p.add_argument("--reps", type=int, default=7, help="timed graph replays (the median is reported)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out_dir", default=None,
                   help="write NAME.txt (the printed table) and NAME.json here (rewritten after every group)")
    p.add_argument("--name", default="bench_decode_kernel", help="file name stem of the outputs")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if args.quick:
        args.groups = ["base"]
    for name, allowed, got in (("--groups", GROUPS, args.groups), ("--cases", tuple(CASES), args.cases),
                               ("--rope_modes", tuple(da._ROPE_MODES), args.rope_modes),
                               ("--qcores", ("dot", "bcast"), args.qcores)):
        bad = [x for x in got if x not in allowed]
        if bad or not got:
            p.error(f"{name}: {','.join(bad) or 'empty'} (choose from {','.join(allowed)})")
    if args.steps < 1 or args.reps < 1:
        p.error("--steps and --reps must be >= 1")
    return args


# ----------------------------------------------------------------------------------------
# Measuring (CUDA)


def copy_rate(dev) -> float:
    """Device-to-device copy rate, bytes/s: 10 copies of 1 GiB of bf16 between two events."""
    x = torch.randn(COPY_NUMEL, device=dev, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        y.copy_(x)
    e.record()
    torch.cuda.synchronize()
    rate = copy_bytes() / (s.elapsed_time(e) / 10 / 1e3)
    del x, y
    torch.cuda.empty_cache()
    return rate


def time_graph(fn, steps: int = 20, reps: int = 7) -> float:
    """us per call of fn: `steps` calls captured in one CUDA graph, median over `reps` replays."""
    fn()  # compiles
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        fn()
    torch.cuda.current_stream().wait_stream(st)
    g = torch.cuda.CUDAGraph()
    stream = torch.cuda.current_stream()
    try:
        with torch.cuda.graph(g):
            for _ in range(steps):
                fn()
    finally:  # a capture that fails in its exit leaves the capture stream current: the caller goes on on its own
        torch.cuda.set_stream(stream)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / steps * 1e3)
    return sorted(ts)[len(ts) // 2]  # the median (the upper of the middle two for an even --reps)


def rope_tables(D: int, L: int, dev):
    """(cos, sin) (L, D/2) fp32, base 1e4 (the rotations model.rope_cache builds)."""
    inv = 1e4 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    a = torch.outer(torch.arange(L, dtype=torch.float64), inv)
    return a.cos().float().to(dev), a.sin().float().to(dev)


def make_tensors(c: Case, dev) -> dict:
    dt = DTYPE
    q = torch.randn(c.B, c.nH, c.Dk, device=dev, dtype=dt)
    k = torch.randn(c.B, c.nG, c.L, c.Dk, device=dev, dtype=dt)
    v = {"same": lambda: k, "view": lambda: k[..., :c.Dv],
         "separate": lambda: torch.randn(c.B, c.nG, c.L, c.Dv, device=dev, dtype=dt)}[c.kv]()
    ln = torch.full((c.B,), c.n, device=dev)
    return dict(q=q, k=k, v=v, ln=ln, rope=rope_tables(c.Dk, c.L, dev) if c.rope else None, scale=1 / math.sqrt(c.Dk))


@contextmanager
def knobs(**kn):
    """Set decode_attention's module knobs for the block, restore them after."""
    missing = [k for k in kn if not hasattr(da, k)]
    if missing:
        raise AttributeError(f"decode_attention has no knob {', '.join(missing)}")
    old = {k: getattr(da, k) for k in kn}
    for k, v in kn.items():
        setattr(da, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(da, k, v)


class _Noop:
    """Stands for a Triton kernel: kernel[grid](...) launches nothing."""

    def __getitem__(self, grid):
        return lambda *a, **k: None


@contextmanager
def no_launch(attr: str):
    """decode_attention.<attr> (a kernel) replaced by a no-op for the block."""
    real = getattr(da, attr)
    setattr(da, attr, _Noop())
    try:
        yield
    finally:
        setattr(da, attr, real)


def split_kernel_info():
    kr = da.last_launch.get("split")
    return getattr(kr, "n_regs", None), getattr(kr, "n_spills", None)


class Bench:
    def __init__(self, args, dev, rate: float, out_lines: list):
        self.args, self.dev, self.rate, self.lines = args, dev, rate, out_lines
        self.rows, self.tensors = [], {}

    def say(self, line: str):
        print(line, flush=True)
        self.lines.append(line)

    def tensors_of(self, key: str) -> dict:
        if key not in self.tensors:
            self.tensors[key] = make_tensors(CASES[key], self.dev)
        return self.tensors[key]

    def run(self, group: str, key: str, tag: str, backend: str = "triton", settings: Optional[dict] = None):
        c, t = CASES[key], self.tensors_of(key)
        fn = lambda: da.decode_attention(t["q"], t["k"], t["v"], t["ln"], scale=t["scale"], rope=t["rope"],  # noqa: E731
                                         backend=backend)
        row = dict(group=group, case=key, cfg=tag, settings=settings or {}, bytes=case_bytes(c))
        da.last_launch.clear()
        try:
            us = time_graph(fn, self.args.steps, self.args.reps)
        except Exception as ex:  # one failing setting does not stop the sweep
            row["error"] = repr(ex)[:300]
            self.rows.append(row)
            self.say(f"FAIL {key} {tag} {row['error']}")
            return None
        regs, spills = split_kernel_info() if backend == "triton" else (None, None)
        row.update(us=us, frac=fraction_of_copy(row["bytes"], us, self.rate), regs=regs, spills=spills)
        self.rows.append(row)
        tail = f"  regs {regs} spills {spills}" if backend == "triton" else ""
        self.say(f"{key:6s} {tag:44s} {us:7.1f} us {100 * row['frac']:5.1f}%{tail}")
        return us

    def tucker(self, B, nH, r2, r3, p2):
        n, dev, dt = self.args.tucker_len, self.dev, DTYPE
        q_lat = torch.randn(B, r2, device=dev, dtype=dt)
        G = (torch.randn(nH, r2, r3, device=dev) / r2 ** 0.5).to(dt)
        Gp = (torch.randn(nH, p2, r3, device=dev) / r3 ** 0.5).to(dt)
        k = torch.randn(B, 1, n, r3, device=dev, dtype=dt)
        ln = torch.full((B,), n, device=dev)
        r = rope_tables(r3, n, dev)
        scale = 0.125
        fused = lambda: da.tucker_decode_attention(q_lat, G, k, k, Gp, ln, scale=scale, rope=r, backend="triton")  # noqa: E731

        def composed():
            q = torch.einsum("bj,hjd->bhd", q_lat, G)
            pos = ln - 1
            q = da._rotate(q.unsqueeze(2), r[0][pos][:, None, None], r[1][pos][:, None, None]).squeeze(2)
            o = da.decode_attention(q, k, k, ln, scale=scale, rope=r, backend="triton")
            return torch.einsum("bhd,hpd->bp", o, Gp)

        nbytes = tucker_bytes(B, r3, n)
        tag = f"B={B} nH={nH} r2={r2} r3={r3} p2={p2}"

        def one(name, fn, settings):
            row = dict(group="tucker", case=f"tucker {name}", cfg=tag, settings=settings, bytes=nbytes)
            da.last_launch.clear()
            try:
                us = time_graph(fn, self.args.steps, self.args.reps)
            except Exception as ex:
                row["error"] = repr(ex)[:300]
                self.rows.append(row)
                self.say(f"FAIL tucker {name} {tag} {row['error']}")
                return
            regs, spills = split_kernel_info()
            row.update(us=us, frac=fraction_of_copy(nbytes, us, self.rate), regs=regs, spills=spills)
            self.rows.append(row)
            self.say(f"tucker {name:22s} {tag:36s} {us:7.1f} us {100 * row['frac']:5.1f}%  regs {regs} spills {spills}")

        for qc in self.args.qcores:
            with knobs(TUCKER_QCORE=qc):
                one(f"fused {qc}", fused, {"TUCKER_QCORE": qc})
        one("composed", composed, {})
        with no_launch("_combine_outcore_kernel"):
            one(f"fused {da.TUCKER_QCORE} SPLIT ONLY", fused, {"TUCKER_QCORE": da.TUCKER_QCORE, "combine": "no-op"})
        try:
            a, b = fused().double(), composed().double()
            err, ref = (a - b).abs().max().item(), b.abs().max().item()
            self.rows.append(dict(group="tucker", case="tucker fused vs composed", cfg=tag, max_abs_err=err, max_abs_ref=ref))
            self.say(f"tucker fused vs composed {tag}: max |diff| {err:.3g}, max |composed| {ref:.3g}")
        except Exception as ex:
            self.say(f"FAIL tucker fused vs composed {tag} {repr(ex)[:300]}")


# the knob sweeps: group -> [(decode_attention knob, label in the case name ('' = the value alone), args field)]
KNOB_GRIDS = {
    "rope": [("ROPE_MODE", "", "rope_modes"), ("ROPE_FP32", "fp32", "rope_fp32"), ("NUM_WARPS", "warps", "warps")],
    "tiles": [("NUM_WARPS", "warps", "warps"), ("BLOCK_N", "BLOCK_N", "block_n"), ("NUM_STAGES", "stages", "stages")],
    "splits": [("CTAS_PER_SM", "CTAS", "ctas"), ("MIN_SPLIT_TOKENS", "MIN_SPLIT", "min_split")],
}
# knobs a sweep sets to its axis' value too: --min_split is the minimum split for every case, wide query-head groups
# (MQA's 32 heads, T128's 16: decode_attention.MIN_SPLIT_TOKENS_WIDE) included, as before that knob existed
LINKED_KNOBS = {"MIN_SPLIT_TOKENS": ("MIN_SPLIT_TOKENS_WIDE",)}


def sweep(b: Bench, args, after_group=None):
    """The selected groups, in order; after_group() after each (main rewrites the files there)."""
    sel = list(args.cases)
    in_group = lambda g: [k for k in GROUP_CASES[g] if k in sel]  # noqa: E731
    for group in args.groups:
        if group == "base":
            for key in sel:
                b.run(group, key, "base")
        elif group == "sdpa":
            for key in sel:
                b.run(group, key, "sdpa", backend="sdpa")
        elif group == "split_only":
            with no_launch("_combine_kernel"):
                for key in in_group(group):
                    b.run(group, key, "SPLIT ONLY", settings={"combine": "no-op"})
        elif group in KNOB_GRIDS:
            axes = [(knob, label, getattr(args, arg)) for knob, label, arg in KNOB_GRIDS[group]]
            for key in in_group(group):
                for values in itertools.product(*(vals for _, _, vals in axes)):
                    kn = {knob: v for (knob, _, _), v in zip(axes, values)}
                    kn.update({linked: kn[knob] for knob in list(kn) for linked in LINKED_KNOBS.get(knob, ())})
                    with knobs(**kn):
                        b.run(group, key, " ".join(f"{label}={v}" if label else str(v)
                                                   for (_, label, _), v in zip(axes, values)), settings=kn)
        elif group == "tucker":
            for cfg in args.tucker:
                b.tucker(*cfg)
        if after_group is not None:
            after_group()


def write_outputs(args, payload: dict, lines: list):
    if not args.out_dir:
        return
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.txt").write_text("\n".join(lines) + "\n")
    (out / f"{args.name}.json").write_text(json.dumps(payload, indent=1) + "\n")


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_decode_kernel: no CUDA GPU here (torch.cuda.is_available() is False); it times Triton kernels on one")
    if not da._triton_available():
        sys.exit("bench_decode_kernel: triton does not import here; it times Triton kernels")
    import triton

    dev = torch.device("cuda")
    torch.manual_seed(args.seed)
    props = torch.cuda.get_device_properties(dev)
    info = run_info(args, dev, argv, "scripts.bench_decode_kernel" if argv is not None else None)
    lines = [f"gpu {props.name} {props.multi_processor_count} torch {torch.__version__} triton {triton.__version__}",
             f"git {info['git_commit']}  command: {info['command']}"]
    for line in lines:
        print(line, flush=True)
    rate = copy_rate(dev)
    b = Bench(args, dev, rate, lines)
    b.say(f"copy rate {rate / 1e12:.2f} TB/s")
    defaults = {k: getattr(da, k) for k in KNOBS if hasattr(da, k)}
    b.say("defaults " + " ".join(f"{k}={v}" for k, v in defaults.items()))
    payload = dict(info, copy_rate=rate, gpu=props.name, sms=props.multi_processor_count, triton=triton.__version__,
                   knob_defaults=defaults,
                   cases={k: dict(asdict(CASES[k]), n=CASES[k].n, bytes=case_bytes(CASES[k]),
                                  floor_us=floor_us(case_bytes(CASES[k]), rate)) for k in args.cases},
                   rows=b.rows)
    try:
        sweep(b, args, after_group=lambda: write_outputs(args, payload, lines))
    finally:
        write_outputs(args, payload, lines)


if __name__ == "__main__":
    main()

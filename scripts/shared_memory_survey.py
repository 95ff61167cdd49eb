"""The shared memory each Triton kernel launch takes on GPUs other than the H200, compiled on a machine without one.

    python -m scripts.shared_memory_survey --out results/bench/session49/shared_survey.md     # ~4 minutes on 2 cores
    python -m scripts.shared_memory_survey --k_up --out results/bench/session49/k_up_survey.md   # MLA's K kernel

Runs tests/test_kernels_compile.py (every kernel's launches as the wrappers make them, recorded instead of run) with
each recorded launch also compiled to the end (ptxas) for sm_75 (T4; V100's sm_70 compiles alike: no pipelining
below sm_80), sm_80 (A100), sm_86 (RTX 3090, A10, A6000; sm_89's RTX 4090, L4 and L40 have the same 100 KB an SM),
sm_90 (H100, H200), sm_100 (B200) and sm_120 (RTX 5090), with the JIT launcher's specialization and the launch's
own warps and stages (scripts.kernel_compile.compile_launch), and writes, kernel by kernel, the most shared memory a
launch took on each against what one program may take there (the opt-in maximum a block; more is Triton's
OutOfResources at launch). Launches with programmatic dependent launch (PDL) are compiled for sm_90 and later only:
the wrappers launch them so there alone (decode_attention.pdl_capable). The shapes are the test file's (GPT-2's
widths for most); decode_wide's step (`python -m scripts.mega_sass --batch 32`) and fused_mla_rope's K from wide
latents (tests/test_kernels_compile.py's k_up bound) are the kernels whose tiles grow with the model.
"""
import argparse
import collections
import sys
from pathlib import Path

import pytest

from decode_attention import SHARED_PER_SM, pipelined_loads, reserved_per_program  # the GPUs' shared memory, one table

ARCHS = (75, 80, 86, 90, 100, 120)

# bytes a program may take: all of an SM's but the 1 KB it reserves from sm_80 on (the opt-in maximum a block: T4
# 65,536, A100 166,912, sm_86 / 89 101,376, H100 / H200 and B200 (sm_100) 232,448, RTX 5090 (sm_120) 101,376)
PER_PROGRAM = {10 * major + minor: per_sm - reserved_per_program(major)
               for (major, minor), per_sm in SHARED_PER_SM.items() if 10 * major + minor in ARCHS}


class Survey:
    """A pytest plugin: each module-level compile_to_ttir call of tests/test_kernels_compile.py also compiles the
    launch just typed (the test's `typed` call before it) for every arch, noting its shared memory."""

    def __init__(self):
        self.rows = collections.defaultdict(dict)  # kernel -> arch -> most bytes
        self.launches = collections.Counter()
        self.pdl_only = collections.Counter()
        self.errors = []

    @pytest.fixture(autouse=True)
    def _compile_every_arch(self, request, monkeypatch):
        from scripts import kernel_compile
        from scripts.kernel_compile import compile_launch
        module = request.module
        if not hasattr(module, "compile_to_ttir"):
            yield
            return
        last = {}
        typed, to_ttir = module.typed, module.compile_to_ttir

        def typed_and_kept(kernel, args, kwargs):
            last.update(kernel=kernel, args=args, kwargs=kwargs)
            return typed(kernel, args, kwargs)

        def to_ttir_and_archs(kernel, signature, constexprs, num_warps=4):
            text = to_ttir(kernel, signature, constexprs, num_warps=num_warps)
            if last.get("kernel") is kernel:
                kwargs = {**last["kwargs"], **{k: v for k, v in constexprs.items() if k == "PDL"}}
                kwargs.pop("launch_pdl", None)
                self.note(kernel, last["args"], kwargs, compile_launch)
            return text

        def sm90_and_archs(kernel, args, kwargs):  # the tests that compile to the end (fused_sample's)
            self.note(kernel, args, kwargs, compile_launch)
            return compile_launch(kernel, args, kwargs, arch=90)

        monkeypatch.setattr(module, "typed", typed_and_kept)
        monkeypatch.setattr(module, "compile_to_ttir", to_ttir_and_archs)
        monkeypatch.setattr(kernel_compile, "compile_sm90", sm90_and_archs)
        yield

    def note(self, kernel, args, kwargs, compile_launch):
        name = kernel.fn.__name__
        self.launches[name] += 1
        archs = tuple(a for a in ARCHS if a >= 90) if kwargs.get("PDL") else ARCHS  # PDL: sm_90 and later
        if kwargs.get("PDL"):
            self.pdl_only[name] += 1
        for arch in archs:
            try:
                shared = compile_launch(kernel, args, kwargs, arch=arch).metadata.shared
            except Exception as e:  # noqa: BLE001 - reported, not raised: the survey goes on
                self.errors.append(f"{name} sm_{arch}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            self.rows[name][arch] = max(shared, self.rows[name].get(arch, 0))

    def table(self) -> str:
        head = "| kernel | launches (PDL: sm_90 and later) | " + " | ".join(f"sm_{a} (of {PER_PROGRAM[a]:,})"
                                                                           for a in ARCHS)
        lines = [head + " |", "| --- | --- | " + " | ".join("---" for _ in ARCHS) + " |"]
        for name in sorted(self.rows):
            cells = []
            for a in ARCHS:
                v = self.rows[name].get(a)
                cells.append("-" if v is None else f"{v:,}" + (" **over**" if v > PER_PROGRAM[a] else ""))
            lines.append(f"| `{name}` | {self.launches[name]} ({self.pdl_only[name]}) | " + " | ".join(cells) + " |")
        lines.append("")
        lines.append("The launches are those the wrappers make on the CPU, where nothing limits shared memory: a kernel "
                     "that sizes itself to the device (`_k_up_fwd_kernel`, by `fused_mla_rope.k_up_launch`) launches "
                     "with fewer stages or rows, or not at all, on a GPU whose limit its setting here passes "
                     "(**over**). Any other **over** would be an OutOfResources on that GPU.")
        lines.append("")
        lines.append("Compile errors: " + ("none" if not self.errors else ""))
        lines += [f"- {e}" for e in self.errors]
        return "\n".join(lines) + "\n"


K_UP_CASES = [  # (dtype, latent dc, heads, head dim, rotary dims, rows, stages)
    ("bfloat16", 128, 12, 64, 32, 64, 3), ("float32", 128, 12, 64, 32, 64, 3), ("float32", 128, 12, 64, 32, 64, 1),
    ("bfloat16", 256, 12, 64, 32, 64, 3), ("bfloat16", 256, 12, 64, 32, 64, 1), ("bfloat16", 512, 12, 64, 32, 64, 3),
    ("bfloat16", 512, 12, 64, 32, 64, 2), ("bfloat16", 512, 16, 128, 64, 64, 3), ("bfloat16", 512, 16, 128, 64, 64, 1),
    ("bfloat16", 512, 16, 128, 64, 16, 1)]


def k_up_table() -> str:
    """fused_mla_rope's _k_up_fwd_kernel (MLA's decoupled-RoPE key from its latent) at K_UP_CASES: the shared memory
    of its sm_75, sm_80 and sm_90 compiles, fused_mla_rope.k_up_shared_bytes (the bound k_up_launch sizes by; in
    brackets sm_75's, without pipelining), and what k_up_launch picks for that latent on each GPU (rows, stages;
    'matmul': none fits)."""
    import torch

    import fused_mla_rope as fm
    from model import rope_cache
    from scripts.kernel_compile import Recorder, compile_launch
    gpus = {"H100, H200": 90, "A100": 80, "sm_86, 89": 86, "T4": 75, "B200": 100, "RTX 5090": 120}  # GPU: arch
    lines = ["| dtype | latent | heads | rows, stages | sm_75 | sm_80 | sm_90 | bound (sm_75's) | k_up_launch: " +
             " / ".join(gpus) + " |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    saved = fm._interpret, fm.k_up_launch, fm._k_up_fwd_kernel, torch.library.wrap_triton
    try:
        fm._interpret = lambda: True  # the CPU passes the wrapper's device checks; the launch is recorded
        torch.library.wrap_triton = lambda kernel: kernel
        for dtype_name, dc, nh, dh, dr, rows, stages in K_UP_CASES:
            dtype = getattr(torch, dtype_name)
            rec = Recorder(saved[2])
            fm._k_up_fwd_kernel, fm.k_up_launch = rec, (lambda *a, rs=(rows, stages): rs)
            cos, sin = (t[:64] for t in rope_cache(dr, 64, 10000.0))
            fm._k_up_fwd_impl(torch.randn(2, 64, dc).to(dtype), torch.randn(nh * dh, dc).to(dtype), None,
                              torch.randn(2, 64, dr).to(dtype), cos, sin, nh)
            shared = [compile_launch(rec.kernel, *rec.launches[0], arch=a).metadata.shared for a in (75, 80, 90)]
            size = torch.tensor([], dtype=dtype).element_size()
            picks = [saved[1](dc, dh, size, PER_PROGRAM[a], pipelined_loads(a // 10)) for a in gpus.values()]
            lines.append(f"| {dtype_name} | {dc} | {nh} x {dh} | {rows}, {stages} | {shared[0]:,} | {shared[1]:,} | "
                         f"{shared[2]:,} | {fm.k_up_shared_bytes(rows, stages, dc, dh, size):,} "
                         f"({fm.k_up_shared_bytes(rows, stages, dc, dh, size, pipelined=False):,}) | "
                         + " / ".join("matmul" if p is None else f"{p[0]}, {p[1]}" for p in picks) + " |")
    finally:
        fm._interpret, fm.k_up_launch, fm._k_up_fwd_kernel, torch.library.wrap_triton = saved
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="python -m scripts.shared_memory_survey --out survey.md")
    ap.add_argument("--out", help="write the table here too (markdown)")
    ap.add_argument("-k", default=None, help="pytest -k expression: a subset of tests/test_kernels_compile.py")
    ap.add_argument("--k_up", action="store_true", help="instead: MLA's K kernel over latent widths, rows and stages, "
                                                        "and what k_up_launch picks on each GPU (~1 minute)")
    a = ap.parse_args(argv)
    if a.k_up:
        text = k_up_table()
        print(text)
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text("`python -m scripts.shared_memory_survey --k_up`\n\n" + text)
        return 0
    root = Path(__file__).resolve().parent.parent
    survey = Survey()
    args = ["-q", "-p", "no:cacheprovider", str(root / "tests" / "test_kernels_compile.py")] + (["-k", a.k] if a.k else [])
    rc = pytest.main(args, plugins=[survey])
    text = survey.table()
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text("`python -m scripts.shared_memory_survey" + (f" -k '{a.k}'" if a.k else "") + "`\n\n" + text)
    return int(rc != 0 or bool(survey.errors))


if __name__ == "__main__":
    sys.exit(main())

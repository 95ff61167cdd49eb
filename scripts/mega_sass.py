"""decode_mega's one-launch step kernel compiled for Hopper (sm_90) on a machine without a GPU, as the launcher
compiles it, and what its machine code says about the grid barriers.

    python -m scripts.mega_sass --variant tucker_8_64_64 --out_dir /tmp/mega_sass [--knob decode_mega.EARLY_ARRIVE=False]
    python -m scripts.mega_sass --variant tucker_8_64_64 --batch 32     # decode_wide's kernel (above 4 sequences)
    python -m scripts.mega_sass --variant tucker_8_64_64 --batch 32 --arch 86   # as an RTX 4090 / L40 would compile it

The kernel's launch for a GPT-2 124M-shaped model (2 layers: the code does not depend on the count; batch 1, 132
SMs as on an H200, PROGRAMS_PER_SM programs each) is recorded instead of run, then compiled by triton.compile with the JIT launcher's
specialization (pointers and integers divisible by 16 marked so, integers equal to 1 made constants: without it,
Triton cannot prove 16-byte alignment and emits 2-byte loads and spills that the GPU's compile does not have).
Writes <variant>.ttgir, .ptx and .sass (ptxas and nvdisasm from Triton's wheel) and prints the registers, the stack,
the load-instruction mix, the instructions of each phase, the layout conversions of weight tiles and, for every
barrier arrival (the release atomic), how many global loads the program has issued since the phase's last store
before that arrival (EARLY_ARRIVE off: the next phase's weight tile, which
the release's MEMBAR then waits for) and between the arrival and the first poll (EARLY_ARRIVE on: the same loads,
in flight while the program polls).
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

import torch

if __name__ == "__main__" and not __package__:  # run as a file: the repository's modules are importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.kernel_compile import Recorder, compile_launch  # noqa: E402


def barrier_loads(sass: str) -> list:
    """(loads between the phase's last store and the arrival, loads between the arrival and the first poll) for
    each release atomic of the SASS, in code order."""
    lines = sass.splitlines()
    out = []
    for i, line in enumerate(lines):
        if "ATOMG.E.ADD.STRONG.GPU" not in line:
            continue
        before = 0
        for prev in reversed(lines[:i]):
            if re.search(r"\bSTG\b|\bRED\b|ATOMG|\bSTG\.", prev):
                break
            before += bool(re.search(r"\bLDG\b", prev))
        after = 0
        for nxt in lines[i + 1:]:
            if "ATOMG.E.CAS" in nxt:
                break
            after += bool(re.search(r"\bLDG\b", nxt))
        out.append((before, after))
    return out


def compile_step(variant: str, out_dir: Path, sms: int = 132, batch: int = 1, timed: bool = False,
                 rope: bool = False, arch: int = 90, dtype: torch.dtype = torch.bfloat16) -> dict:
    """The step kernel's launch for `variant` at `batch` sequences (decode_mega.step_decoder's: decode_wide's above
    decode_mega.MAX_ROWS) compiled for sm_{arch} (kernel_compile.compile_launch; 90 by default) and disassembled
    into out_dir: registers, stack,
    shared memory a program (decode_wide's: WideDecoder.shared_bytes() beside it, shared_estimate), the load mix,
    tensor-core (HMMA) and asynchronous-copy (LDGSTS) instructions, MEMBARs and barrier_loads. timed: the timed step's
    compile (TIMING, every barrier stamped; timed_step's). rope: the variant with RoPE (q and k rotated in phase A).
    dtype: the weights' (bf16 by default; fp16 where a GPU before sm_80 has no bf16 tensor cores)."""
    import triton

    import decode_attention as da
    import decode_mega as dm
    import decode_wide as dw
    from model import GPT, GPTConfig
    from scripts.bench_train import VARIANTS

    match = next((v for v in VARIANTS if v.id == variant), None)
    if match is None:
        raise SystemExit(f"unknown variant {variant!r}: one of {', '.join(v.id for v in VARIANTS)}")
    wide = batch > dm.MAX_ROWS
    saved = da._interpret, dm._interpret, dm._mega_step_kernel, dw._wide_step_kernel
    rec = Recorder(dw._wide_step_kernel if wide else dm._mega_step_kernel)
    try:
        da._interpret = dm._interpret = lambda: True  # the CPU passes the wrappers' device checks (decode_wide's own
        #                                               _interpret stays: its launch is the GPU's)
        if wide:
            dw._wide_step_kernel = rec
        else:
            dm._mega_step_kernel = rec
        cfg = GPTConfig(n_layer=2, n_head=12, n_embd=768, block_size=1024, vocab_size=50304, bias=False,
                        **match.overrides, **({"pos_emb": "rope"} if rope else {}))
        model = GPT(cfg).to(dtype).eval()
        caches = model.new_caches(batch, 1024)
        per_sm = dw.PROGRAMS_PER_SM if wide else dm.PROGRAMS_PER_SM
        mega = dm.step_decoder(model, caches, programs=sms * per_sm)  # as on the GPU
        estimate = mega.shared_bytes(pipelined=da.pipelined_loads(arch // 10)) if wide else None  # decode_wide's
        #                                                           fit check's shared memory a program on sm_{arch}
        idx, pos = torch.zeros(batch, dtype=torch.long), torch.tensor([10])
        if timed:  # as timed_step sets it (the kernel only reads its presence and address here)
            mega.times = torch.zeros(mega.programs, mega._stamp_slots(), 4, dtype=torch.int64)
        if wide:
            mega._launch(mega._stacked_weights(), idx, pos, 0, 0, 2, True, True)
        else:
            mega._launch(mega._stacked_weights(), idx, pos, 0, 0, 2, True)
    finally:
        da._interpret, dm._interpret, dm._mega_step_kernel, dw._wide_step_kernel = saved
    compiled = compile_launch(rec.kernel, *rec.launches[0], arch=arch)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{variant}.ttgir").write_text(compiled.asm["ttgir"])  # the layouts Triton chose
    (out_dir / f"{variant}.ptx").write_text(compiled.asm["ptx"])
    cubin = out_dir / f"{variant}.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    sass = subprocess.run([str(tools / "nvdisasm"), "-c", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    (out_dir / f"{variant}.sass").write_text(sass)
    usage = subprocess.run([str(tools / "cuobjdump"), "-res-usage", str(cubin)], capture_output=True, text=True,
                           check=True).stdout
    regs = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    loads = {}
    for m in re.finditer(r"\b(LDG\.[A-Z0-9.]+|LDL[A-Z0-9.]*)", sass):
        loads[m.group(1)] = loads.get(m.group(1), 0) + 1
    return dict(registers=int(regs.group(1)) if regs else None, stack=int(stack.group(1)) if stack else None,
                shared=compiled.metadata.shared, shared_estimate=estimate, hmma=len(re.findall(r"\bHMMA\b", sass)),
                timer_reads=compiled.asm["ptx"].count("%globaltimer"),
                ldgsts=len(re.findall(r"\bLDGSTS\b", sass)),
                loads=loads, membars=sass.count("MEMBAR"), barriers=barrier_loads(sass),
                converts=layout_converts(compiled.asm["ttgir"]), sections=phase_sections(sass))


def layout_converts(ttgir: str) -> list:
    """The (shape, element type) of every tensor a ttg.convert_layout moves to another layout (through shared
    memory where threads exchange elements), e.g. ((16, 1024), 'bf16'): a weight tile, where a product's layout is not
    the one it was loaded in."""
    out = []
    for m in re.finditer(r"ttg\.convert_layout %\S+ : tensor<((?:\d+x)+)(\w+),", ttgir):
        out.append((tuple(int(d) for d in m.group(1).rstrip("x").split("x")), m.group(2)))
    return out


def phase_sections(sass: str) -> list:
    """SASS instructions from each barrier's release (the poll's compare-and-swap) to the next arrival (the release
    atomic), in code order, and the count after the last release: [A, B1, B2D, fused MLP, ..., LM head] for the step
    kernel (the first entry counts from the kernel's start)."""
    lines = [ln for ln in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]+\*/", ln)]
    out, start = [], 0
    for i, ln in enumerate(lines):
        if "ATOMG.E.CAS" in ln:
            start = i
        elif "ATOMG.E.ADD.STRONG.GPU" in ln:
            out.append(i - start)
    return out + [len(lines) - start]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", default="tucker_8_64_64")
    p.add_argument("--out_dir", default="mega_sass")
    p.add_argument("--knob", action="append", default=[], metavar="decode_mega.NAME=VALUE")
    p.add_argument("--batch", type=int, default=1, help="sequences (above decode_mega.MAX_ROWS: decode_wide's kernel)")
    p.add_argument("--rope", action="store_true", help="the variant with RoPE instead of learned positions")
    p.add_argument("--arch", type=int, default=90, help="compute capability to compile for: 90 (Hopper), 80 (A100), "
                                                         "86 / 89 (RTX, A10, L4, L40), 75 (T4), 70 (V100)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                   help="the weights' dtype (float16 or float32 where a GPU before sm_80 lacks bf16 tensor cores)")
    a = p.parse_args(argv)
    from scripts.bench_decode import KNOB_MODULES
    from scripts.bench_train import set_module_knobs
    knobs = set_module_knobs(a.knob, KNOB_MODULES)
    r = compile_step(a.variant, Path(a.out_dir), batch=a.batch, rope=a.rope, arch=a.arch, dtype=getattr(torch, a.dtype))
    name = a.variant + (" with RoPE" if a.rope else "")
    print(f"step kernel, {name}, batch {a.batch}, sm_{a.arch}, {a.dtype}, knobs {knobs or 'none'}: "
          f"{r['registers']} registers, "
          f"stack {r['stack']} B, shared memory {r['shared']} B a program, {r['hmma']} HMMA, {r['ldgsts']} LDGSTS, "
          f"{r['membars']} MEMBARs")
    print("loads: " + ", ".join(f"{k} {v}" for k, v in sorted(r["loads"].items())))
    import decode_mega as dm
    wide = a.batch > dm.MAX_ROWS
    phases = "the embeddings, A, B1, B2, D, E, F, ..., LM head" if wide else "A, B1, B2D, MLP, ..., LM head"
    print(f"instructions from each release to the next arrival ({phases}): " + ", ".join(str(n) for n in r["sections"]))
    tiles = [f"{'x'.join(map(str, shape))} {dt}" for shape, dt in r["converts"] if len(shape) > 1 and shape[0] > 1
             and shape[-1] >= 256]
    print(f"layout conversions of weight-tile-shaped tensors (rows x >= 256 columns): {len(tiles)}"
          + (f" ({', '.join(tiles)})" if tiles else ""))
    for i, (before, after) in enumerate(r["barriers"]):
        print(f"release atomic {i}: {before} global loads since the phase's last store, {after} between it and the "
              f"first poll")


if __name__ == "__main__":
    main()

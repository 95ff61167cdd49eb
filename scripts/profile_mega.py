"""Where decode_mega's step goes, phase by phase: the step launched a phase at a time (MegaDecoder.decode_step's
phases=True) under the CUDA profiler, each launch's kernel time attributed to its phase (A the layer's input, norm1 +
QKV; B1 attention splits; B2D their merge and the output projection; E x1, norm2, fc and GELU; F proj; and the LM head),
median over the profiled steps.

    python3 -m scripts.profile_mega --variants mha,tucker_8_64_64 --context 4096 [--knob decode_mega.NUM_WARPS=4]

The phases launched alone pay a launch each instead of a barrier; their sum is what the one-launch step spends
outside its barriers (bench_decode's graph_mega_phases row times the same launches end to end).
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.bench_decode import KNOB_MODULES, build_model, fill_caches  # noqa: E402
from scripts.bench_train import VARIANTS, set_module_knobs  # noqa: E402

PHASES = ("A x0+norm1+qkv", "B1 attention splits", "B2D merge+out proj", "E x1+norm2+fc+gelu", "F proj")


@torch.no_grad()
def profile_variant(name: str, context: int, batch: int, steps: int) -> dict:
    from decode_mega import MegaDecoder
    from model import StaticDecoder
    device = torch.device("cuda")
    args = argparse.Namespace(tiny=False, rope=False)
    variant = next((v for v in VARIANTS if v.id == name), None)
    if variant is None:
        raise SystemExit(f"unknown variant {name!r}: one of {', '.join(v.id for v in VARIANTS)}")
    model = build_model(variant, args, context + 1, device)
    decoder = StaticDecoder(model, batch, device=device, max_len=context + 1)
    fill_caches(decoder.caches, context, torch.Generator(device=device).manual_seed(0))
    mega = MegaDecoder(model, decoder.caches)
    tokens = torch.randint(model.config.vocab_size, (batch, 1), device=device)
    pos = torch.tensor([context], device=device)
    for _ in range(3):  # compile, warm up
        mega.decode_step(tokens, decoder.caches, pos, phases=True)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            mega.decode_step(tokens, decoder.caches, pos, phases=True)
        torch.cuda.synchronize()
    launches = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                       and "_mega_step_kernel" in e.name), key=lambda e: e.time_range.start)
    per_step = model.config.n_layer * len(PHASES) + 1
    if len(launches) != steps * per_step:
        raise RuntimeError(f"{len(launches)} kernel records, expected {steps} x {per_step}")
    us = {p: [] for p in PHASES + ("LM head",)}
    for s in range(steps):
        step = launches[s * per_step:(s + 1) * per_step]
        for i, p in enumerate(PHASES):
            us[p].append(sum(e.time_range.elapsed_us() for e in step[i:-1:len(PHASES)]))
        us["LM head"].append(step[-1].time_range.elapsed_us())
    return {p: statistics.median(v) for p, v in us.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default="mha,tucker_8_64_64")
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--knob", action="append", default=[], metavar="MODULE.NAME=VALUE")
    a = p.parse_args(argv)
    knobs = set_module_knobs(a.knob, KNOB_MODULES)
    rows = {v: profile_variant(v, a.context, a.batch, a.steps) for v in a.variants.split(",")}
    cols = PHASES + ("LM head",)
    print(f"decode_mega phases, batch {a.batch}, {a.context} cached, us per step (all layers), knobs {knobs or 'none'}, "
          f"{torch.cuda.get_device_name()}")
    print("| variant | " + " | ".join(cols) + " | sum |")
    print("| --- " * (len(cols) + 2) + "|")
    for v, r in rows.items():
        print(f"| {v} | " + " | ".join(f"{r[c]:.1f}" for c in cols) + f" | {sum(r.values()):.1f} |")


if __name__ == "__main__":
    main()

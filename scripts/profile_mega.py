"""Where decode_mega's step goes, phase by phase: the step launched a phase at a time (MegaDecoder.decode_step's
phases=True) under the CUDA profiler, each launch's kernel time attributed to its phase (A the layer's input, norm1 +
QKV; B1 attention splits; B2D their merge and the output projection; E x1, norm2, fc and GELU; F proj; and the LM head),
median over the profiled steps. With decode_mega.FUSED_MLP (the default) E's launch runs the whole MLP and F's is empty.

    python3 -m scripts.profile_mega --variants mha,tucker_8_64_64 --context 4096 [--knob decode_mega.NUM_WARPS=4]

The phases launched alone pay a launch each instead of a barrier; their sum is what the one-launch step spends
outside its barriers (bench_decode's graph_mega_phases row times the same launches end to end). With --batch above
decode_mega.MAX_ROWS the step is decode_wide's (its phases: the embeddings, A, B1, B2, D, E, F, the LM head):

    python3 -m scripts.profile_mega --variants tucker_8_64_64,tucker_shared_8_64_64 --batch 32 --context 16384

    python3 -m scripts.profile_mega --barriers --variants mha,tucker_8_64_64 --context 4096

times the one-launch step itself instead (MegaDecoder.timed_step: every program stamps the GPU's nanosecond timer as
it arrives at each grid barrier and as it is released): per phase, summed over the layers, the span from the median
release of the barrier before it to the median release of its own, split into `work` (until the last program
arrives) and `sync` (from that arrival to the median release), and the median program's own work (`median work`);
`--dump DIR` also saves every timed step's raw stamps (each program's SM among them) as DIR/<variant>_stamps.pt.

    ncu --profile-from-start off --clock-control none --kernel-name regex:step_kernel --launch-count 7 \
        --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
        --section Occupancy python3 -m scripts.profile_mega --profiled_step --variants tucker_8_64_64 --batch 32 \
        --context 16384

`--profiled_step`: one step launched phase by phase between cudaProfilerStart and Stop (after 3 unprofiled ones), for
an external profiler such as Nsight Compute (above: decode_wide's first 7 launches, the embeddings and layer 0's
A, B1, B2, D, E, F; results/bench/session22/call4/ncu_*.txt).
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

if __name__ == "__main__" and not __package__:  # run as a file: the repository's modules are importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.bench_decode import KNOB_MODULES, build_model, fill_caches  # noqa: E402
from scripts.bench_train import VARIANTS, set_module_knobs  # noqa: E402

PHASES = ("A x0+norm1+qkv", "B1 attention splits", "B2D merge+out proj", "E x1+norm2+fc+gelu", "F proj")
WIDE_PHASES = ("A norm1+qkv", "B1 attention splits", "B2 merge", "D out proj+residual", "E norm2+fc+gelu",
               "F proj+residual")  # decode_wide's (batch > decode_mega.MAX_ROWS), by their ONLY codes 1 .. 6


def setup(name: str, context: int, batch: int):
    """(model, caches, step decoder, tokens, pos): a benchmark variant on the GPU, its caches filled with `context`
    random rows, the next token's ids and position (decode_mega.step_decoder: MegaDecoder up to decode_mega.MAX_ROWS
    sequences, decode_wide.WideDecoder above)."""
    from decode_mega import step_decoder
    from model import StaticDecoder
    device = torch.device("cuda")
    variant = next((v for v in VARIANTS if v.id == name), None)
    if variant is None:
        raise SystemExit(f"unknown variant {name!r}: one of {', '.join(v.id for v in VARIANTS)}")
    model = build_model(variant, argparse.Namespace(tiny=False, rope=False), context + 1, device)
    decoder = StaticDecoder(model, batch, device=device, max_len=context + 1)
    fill_caches(decoder.caches, context, torch.Generator(device=device).manual_seed(0))
    tokens = torch.randint(model.config.vocab_size, (batch, 1), device=device)
    return model, decoder.caches, step_decoder(model, decoder.caches), tokens, torch.tensor([context], device=device)


def phase_launches(mega, tokens, caches, pos, steps: int, kernel: str) -> list:
    """The CUDA kernel records of `steps` steps launched phase by phase (after 3 unprofiled ones), in time order."""
    for _ in range(3):  # compile, warm up
        mega.decode_step(tokens, caches, pos, phases=True)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            mega.decode_step(tokens, caches, pos, phases=True)
        torch.cuda.synchronize()
    return sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and kernel in e.name),
                  key=lambda e: e.time_range.start)


@torch.no_grad()
def profiled_step(name: str, context: int, batch: int) -> None:
    """One step of `name` launched phase by phase between cudaProfilerStart and cudaProfilerStop (3 before it, not
    profiled: the compiles and a warm-up), for a profiler that records only that range."""
    model, caches, mega, tokens, pos = setup(name, context, batch)
    for _ in range(3):
        mega.decode_step(tokens, caches, pos, phases=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    mega.decode_step(tokens, caches, pos, phases=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"{name}: one step phase by phase profiled (batch {batch}, {context} cached, {type(mega).__name__})")


@torch.no_grad()
def profile_wide(name: str, context: int, batch: int, steps: int) -> dict:
    """decode_wide's step (batch > decode_mega.MAX_ROWS) launched phase by phase: kernel us per step of the
    embeddings, each of WIDE_PHASES (summed over the layers) and the final norm + LM head, medians over the steps."""
    import decode_wide as dw
    model, caches, mega, tokens, pos = setup(name, context, batch)
    launches = phase_launches(mega, tokens, caches, pos, steps, "_wide_step_kernel")
    order = dw.PHASES  # a layer's launches (ONLY), in order
    phases = [WIDE_PHASES[only - 1] for only in order]
    n = len(order)
    per_step = model.config.n_layer * n + 2
    if len(launches) != steps * per_step:
        raise RuntimeError(f"{len(launches)} kernel records, expected {steps} x {per_step}")
    us = {p: [] for p in ["embeddings"] + phases + ["LM head"]}
    for s in range(steps):
        step = [e.time_range.elapsed_us() for e in launches[s * per_step:(s + 1) * per_step]]
        us["embeddings"].append(step[0])
        for i, p in enumerate(phases):
            us[p].append(sum(step[1 + i:-1:n]))
        us["LM head"].append(step[-1])
    return {p: statistics.median(v) for p, v in us.items()}


@torch.no_grad()
def profile_variant(name: str, context: int, batch: int, steps: int) -> dict:
    """Kernel us per step of each phase (summed over the layers) and the LM head, launched phase by phase. With
    decode_mega.FUSED_MLP, E's launches hold the whole MLP and F's row is zero (no launch)."""
    import decode_mega as dm
    model, caches, mega, tokens, pos = setup(name, context, batch)
    launches = phase_launches(mega, tokens, caches, pos, steps, "_mega_step_kernel")
    order = dm.PHASE_LAUNCHES[dm.FUSED_MLP]  # a layer's launches (ONLY), in order
    per_step = model.config.n_layer * len(order) + 1
    if len(launches) != steps * per_step:
        raise RuntimeError(f"{len(launches)} kernel records, expected {steps} x {per_step}")
    us = {p: [] for p in PHASES + ("LM head",)}
    for s in range(steps):
        step = launches[s * per_step:(s + 1) * per_step]
        for p_i, p in enumerate(PHASES):
            i = order.index(p_i + 1) if p_i + 1 in order else None
            us[p].append(0.0 if i is None else sum(e.time_range.elapsed_us() for e in step[i:-1:len(order)]))
        us["LM head"].append(step[-1].time_range.elapsed_us())
    return {p: statistics.median(v) for p, v in us.items()}


def barrier_phases(stamps, n_layer: int, phases=PHASES, lead=()) -> dict:
    """Per phase kind (`phases`, summed over the layers; A .. F by default), each phase before the layers (`lead`:
    decode_wide's ("embeddings",)) and the LM head, us: span, work, sync and median work, from one timed step's
    stamps (programs, len(lead) + len(phases) L + 2, 4) (MegaDecoder.timed_step's layout: slot 0 the start, then a
    slot per barrier in phase order, the last the end; WideDecoder.timed_step's with lead ("embeddings",) and its
    six phases). A slot no program stamped (E's with decode_mega.FUSED_MLP: no barrier
    there) counts nothing, and the phase after it spans both (F's row holds the fused MLP). Also `total`
    (the first start to the last end) and `timer step` (the smallest nonzero difference between two ns stamps: the
    timer's resolution as seen)."""
    stamps = torch.as_tensor(stamps, dtype=torch.int64)
    P, slots, _ = stamps.shape
    n, lead = len(phases), tuple(lead)
    if slots != len(lead) + n * n_layer + 2:
        raise ValueError(f"stamps for {slots} slots, expected {len(lead)} + {n} x {n_layer} + 2")
    arrive = stamps[:, :, 0].double() / 1e3  # us
    release = stamps[:, :, 2].double() / 1e3
    release[:, 0] = arrive[:, 0]  # the start: slot 0 holds its stamp in the arrival columns
    rel_med = release.median(dim=0).values  # (slots,)
    out = {p: dict(span=0.0, work=0.0, sync=0.0, median_work=0.0) for p in lead + tuple(phases)}
    prev = 0  # the last slot with a barrier
    for b in range(1, slots - 1):
        if not stamps[:, b, 0].any():  # no barrier here
            continue
        row = out[lead[b - 1] if b <= len(lead) else phases[(b - 1 - len(lead)) % n]]
        last = arrive[:, b].max().item()
        row["span"] += rel_med[b].item() - rel_med[prev].item()
        row["work"] += last - rel_med[prev].item()
        row["sync"] += rel_med[b].item() - last
        row["median_work"] += (arrive[:, b] - release[:, prev]).median().item()
        prev = b
    end = arrive[:, -1]
    head = end.max().item() - rel_med[-2].item()
    out["LM head"] = dict(span=head, work=head, sync=0.0,
                          median_work=(end - release[:, -2]).median().item())
    ns = torch.unique(torch.cat([stamps[:, :, 0].reshape(-1), stamps[:, 1:-1, 2].reshape(-1)]))  # every ns stamp
    ns = ns[ns > 0]  # (a skipped slot's zeros)
    gaps = ns[1:] - ns[:-1]
    out["total"] = end.max().item() - arrive[:, 0].min().item()
    out["timer step"] = (gaps[gaps > 0].min().item() / 1e3) if gaps.numel() else float("nan")
    return out


@torch.no_grad()
def time_barriers(name: str, context: int, batch: int, steps: int, dump=None) -> dict:
    """barrier_phases of `steps` one-launch steps, each entry's median over the steps; dump: a folder to save every
    step's stamps in (<variant>_stamps.pt: (steps, programs, slots, 4) int64, MegaDecoder.timed_step's layout, slot
    0's third column the program's SM)."""
    model, caches, mega, tokens, pos = setup(name, context, batch)
    for _ in range(3):  # compile, warm up (the timed variant compiles on its first call)
        mega.decode_step(tokens, caches, pos)
        mega.timed_step(tokens, caches, pos)
    stamps = [mega.timed_step(tokens, caches, pos) for _ in range(steps)]
    mega.check()
    if dump:
        Path(dump).mkdir(parents=True, exist_ok=True)
        torch.save(torch.stack(stamps), Path(dump) / f"{name}_stamps.pt")
    import decode_mega as dm
    wide = dict(phases=WIDE_PHASES, lead=("embeddings",)) if batch > dm.MAX_ROWS else {}  # decode_wide's layout
    runs = [barrier_phases(s, model.config.n_layer, **wide) for s in stamps]
    med = lambda vals: statistics.median(vals)
    out = {k: (med([r[k] for r in runs]) if not isinstance(runs[0][k], dict)
               else {f: med([r[k][f] for r in runs]) for f in runs[0][k]}) for k in runs[0]}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default="mha,tucker_8_64_64")
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--knob", action="append", default=[], metavar="MODULE.NAME=VALUE")
    p.add_argument("--barriers", action="store_true", help="time the one-launch step's phases by its barrier stamps")
    p.add_argument("--dump", default=None, metavar="DIR", help="--barriers: save every step's stamps in DIR")
    p.add_argument("--profiled_step", action="store_true",
                   help="one step phase by phase between cudaProfilerStart and Stop (for ncu --profile-from-start off)")
    a = p.parse_args(argv)
    knobs = set_module_knobs(a.knob, KNOB_MODULES)
    if a.profiled_step:
        for v in a.variants.split(","):
            profiled_step(v, a.context, a.batch)
        return
    if a.barriers:
        import decode_mega as dm
        kernel = "decode_wide" if a.batch > dm.MAX_ROWS else "decode_mega"
        print(f"{kernel} one-launch step, batch {a.batch}, {a.context} cached, us per step (all layers; median of "
              f"{a.steps} steps), knobs {knobs or 'none'}, {torch.cuda.get_device_name()}")
        print("| variant | phase | span | work (last arrival) | sync | median work |")
        print("| --- | --- | --- | --- | --- | --- |")
        for v in a.variants.split(","):
            r = time_barriers(v, a.context, a.batch, a.steps, a.dump)
            if a.batch > dm.MAX_ROWS:  # decode_wide's phases
                for ph in ("embeddings",) + WIDE_PHASES + ("LM head",):
                    x = r[ph]
                    print(f"| {v} | {ph} | {x['span']:.1f} | {x['work']:.1f} | {x['sync']:.1f} | "
                          f"{x['median_work']:.1f} |")
                print(f"| {v} | whole step (first start to last end) | {r['total']:.1f} | | | |")
                print(f"| {v} | timer resolution seen | {r['timer step']:.3f} | | | |")
                continue
            fused = not any(r[PHASES[3]].values())  # no barrier after E: the fused MLP's phase in F's row
            for ph in PHASES + ("LM head",):
                if fused and ph == PHASES[3]:
                    continue
                x, label = r[ph], ("E+F x1+norm2+fc+gelu+proj (fused MLP)" if fused and ph == PHASES[4] else ph)
                print(f"| {v} | {label} | {x['span']:.1f} | {x['work']:.1f} | {x['sync']:.1f} | "
                      f"{x['median_work']:.1f} |")
            print(f"| {v} | whole step (first start to last end) | {r['total']:.1f} | | | |")
            print(f"| {v} | timer resolution seen | {r['timer step']:.3f} | | | |")
        return
    import decode_mega as dm
    wide = a.batch > dm.MAX_ROWS  # decode_wide's step
    rows = {v: (profile_wide if wide else profile_variant)(v, a.context, a.batch, a.steps)
            for v in a.variants.split(",")}
    cols = list(next(iter(rows.values()))) if wide else PHASES + ("LM head",)
    if dm.FUSED_MLP and not wide:  # E's launch holds the whole MLP, F has none
        for r in rows.values():
            r["E+F fused MLP"] = r.pop(PHASES[3]) + r.pop(PHASES[4])
        cols = PHASES[:3] + ("E+F fused MLP", "LM head")
    print(f"{'decode_wide' if wide else 'decode_mega'} phases, batch {a.batch}, {a.context} cached, us per step (all "
          f"layers), knobs {knobs or 'none'}, {torch.cuda.get_device_name()}")
    print("| variant | " + " | ".join(cols) + " | sum |")
    print("| --- " * (len(cols) + 2) + "|")
    for v, r in rows.items():
        print(f"| {v} | " + " | ".join(f"{r[c]:.1f}" for c in cols) + f" | {sum(r.values()):.1f} |")


if __name__ == "__main__":
    main()

"""
Where a training loop timed nanoGPT's way loses time that the GPU's own step time does not show.

bench_train times a step two ways: CUDA events around forward, backward and the optimizer (`total_ms`), and
nanoGPT's way, wall clock over iterations that each end with `loss.item()` (`loop_ms`, what its ratio to
nanoGPT uses). Where loop_ms exceeds total_ms the GPU waits for the host between iterations. This script
profiles that loop (torch.profiler, CPU and CUDA) for our model and, given its folder, nanoGPT's own model
in nanoGPT's own loop, and reports per iteration: the wall time, the GPU's busy time (the union of its
kernels), the idle gap from one iteration's last kernel to the next one's first, and the host's
top-level operations inside that gap (what the GPU waited for).

    python -m scripts.loop_gap --variant mha --shape 12x1024 --nanogpt .carry/nanogpt --out_dir OUT
    python -m scripts.loop_gap --graph_step --rounds 5 --nanogpt .carry/nanogpt --out_dir OUT   # ours vs nanoGPT, alternating
    python -m scripts.loop_gap --graph_step --master_weights --rope --variant mha --against mla_shared128 --rounds 7 \
        --out_dir OUT   # two of our variants alternating: MLA's step over MHA's, round by round

With --rounds R both steps are built and warmed first, then their unprofiled loops alternate R times; the
report gives each round's loops with the GPU's SM clock and power over them (scripts/gpu_clock.py) and the
ratio nanoGPT ms / ours ms per round and its median: on a GPU at its power limit two loops timed seconds
apart can run at clocks 10% apart, so the ratio is taken between neighbours. --against VARIANT puts a second of
our variants in nanoGPT's place (same shape, positions and fast-path flags): the ratio is then its ms over
--variant's, the comparison for a target that two of our rows meet or miss by less than their runs vary.

Writes loop_gap.md / loop_gap.json. CUDA only (the gap is a GPU's).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file: the repository's modules are importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from graph_step import WARMUP as GRAPH_WARMUP  # noqa: E402

from scripts.bench_multigpu import fmt  # noqa: E402
from scripts.bench_train import (VARIANTS, _ANNOTATION, TRAIN_KNOB_MODULES, add_common_args, add_knob_arg, apply_blas,
                                 set_module_knobs, markdown_table, parse_shapes,  # noqa: E402
                                 row_config, run_info, select_variants, write_report)


def busy_union(intervals):
    """Total length of the union of (start, end) intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def analyse(events, marks, top_n: int = 8) -> dict:
    """events: torch.profiler's FunctionEvents of the profiled iterations; marks: their host start times (µs,
    the profiler's clock, from 'loop_gap.iter' ranges). Per iteration: wall, GPU busy, the gap before its
    first kernel, and the host's top-level ops overlapping the gaps (total µs per name)."""
    from torch.autograd import DeviceType
    kev = [e for e in events if e.device_type == DeviceType.CUDA
           and not getattr(e, "is_user_annotation", False) and not _ANNOTATION.fullmatch(e.name)]
    names = {(e.time_range.start, e.time_range.end): e.name for e in kev}
    kernels = sorted(names)
    top = lambda e: e.cpu_parent is None or e.cpu_parent.name.startswith("loop_gap")  # noqa: E731
    host_top = [e for e in events if e.device_type == DeviceType.CPU and top(e)
                and not e.name.startswith(("ProfilerStep", "loop_gap"))]
    iters, gaps = [], []
    for i in range(len(marks) - 1):
        lo, hi = marks[i], marks[i + 1]
        ks = [k for k in kernels if lo <= k[0] < hi]  # kernels that started while this iteration's host code ran
        if not ks:
            continue
        first = min(k[0] for k in ks)
        prev = [k[1] for k in kernels if k[0] < lo]  # the earlier iterations' kernels
        gap = (first - max(prev)) if prev else None  # from the previous iteration's last kernel
        if gap is not None and gap > 0:
            gaps.append((max(prev), first))
        iters.append({"wall_ms": (hi - lo) / 1e3, "gpu_busy_ms": busy_union(ks) / 1e3,
                      "gap_before_ms": None if gap is None else gap / 1e3, "kernels": len(ks)})
    # idle stretches inside iterations (>= 20 µs): where the GPU waited mid-step, named by the kernels around them
    inner, inner_total = {}, 0.0
    for (a0, a1), (b0, b1) in zip(kernels, kernels[1:]):
        idle = b0 - max(a1, a0)
        if idle >= 20 and not any(m for m in marks if a1 <= m <= b0):
            key = f"{_short(names.get((a0, a1), '?'))} -> {_short(names.get((b0, b1), '?'))}"
            inner[key] = inner.get(key, 0.0) + idle / 1e3
            inner_total += idle / 1e3
    in_gap = {}
    for a, b in gaps:
        for e in host_top:
            s, t = e.time_range.start, e.time_range.end
            overlap = min(t, b) - max(s, a)
            if overlap > 0:
                in_gap[e.name] = in_gap.get(e.name, 0.0) + overlap / 1e3
    n = max(1, len(gaps))
    return {"iterations": iters,
            "median_wall_ms": statistics.median(r["wall_ms"] for r in iters) if iters else None,
            "median_busy_ms": statistics.median(r["gpu_busy_ms"] for r in iters) if iters else None,
            "median_gap_ms": statistics.median(r["gap_before_ms"] for r in iters if r["gap_before_ms"] is not None)
            if gaps else None,
            "host_in_gap_ms": dict(sorted(((k, v / n) for k, v in in_gap.items()), key=lambda kv: -kv[1])[:top_n]),
            "idle_inside_ms": inner_total / max(1, len(iters)),
            "idle_inside_top_ms": dict(sorted(((k, v / max(1, len(iters))) for k, v in inner.items()),
                                              key=lambda kv: -kv[1])[:top_n])}


def _short(name: str) -> str:
    return name if len(name) <= 60 else name[:57] + "..."


def profile_loop(step, n: int) -> dict:
    """torch.profiler (CPU + CUDA) over n iterations of step(i) (each ends with loss.item(), nanoGPT's way)."""
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            with record_function("loop_gap.iter"):
                step(i).item()
        torch.cuda.synchronize()
    from torch.autograd import DeviceType
    events = prof.events()
    ranges = [e.time_range for e in events if e.name == "loop_gap.iter" and e.device_type == DeviceType.CPU]
    return analyse(events, sorted(r.start for r in ranges) + [max(r.end for r in ranges)])


def ours(variant, batch_size: int, seq_len: int, args, device):
    """Our model as bench_train builds it (compiled as train.py compiles, fused AdamW or with --master_weights
    master_adamw.MasterAdamW, bf16 autocast) and its
    step: plain, or replayed from one CUDA graph (--graph_step, graph_step.GraphedTrainStep). step(i) returns
    the loss tensor (no sync)."""
    from graph_step import GraphedTrainStep
    from model import GPT, train_compile_options
    cfg = row_config(variant, args, args.rope, seq_len)
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = GPT(cfg)
    opt = model.configure_optimizers(weight_decay=0.1, learning_rate=6e-4, betas=(0.9, 0.95), device_type="cuda",
                                     master_weights=args.master_weights)
    net = torch.compile(model, options=train_compile_options("default"))  # as train.py compiles
    x = torch.randint(cfg.vocab_size, (batch_size, seq_len), device=device)
    y = torch.randint(cfg.vocab_size, (batch_size, seq_len), device=device)
    if args.graph_step:
        graph = GraphedTrainStep(net, opt, accum=1, batch_size=batch_size, seq_len=seq_len, device=device,
                                 dtype="bfloat16")
        return lambda i: graph([(x, y)], 6e-4)

    def step(i):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = net(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def nanogpt(folder: Path, batch_size: int, seq_len: int, device):
    """nanoGPT's model.py from its folder, configured and stepped as its bench.py does (no prints)."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", folder / "model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    conf = mod.GPTConfig(block_size=seq_len, n_layer=12, n_head=12, n_embd=768, dropout=0, bias=False)
    model = mod.GPT(conf).to(device)
    opt = model.configure_optimizers(weight_decay=1e-2, learning_rate=1e-4, betas=(0.9, 0.95), device_type="cuda")
    net = torch.compile(model)
    x = torch.randint(50304, (batch_size, seq_len), device=device)
    y = torch.randint(50304, (batch_size, seq_len), device=device)

    def step(i):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = net(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


LOOP_STEPS = 20  # nanoGPT's bench.py times 20 iterations


def timed_loops(step, n: int = LOOP_STEPS, device: torch.device = torch.device("cuda"), clock_log=None) -> dict:
    """step timed over n iterations three ways (wall clock; mean and median ms per iteration):
    'item': nanoGPT's bench.py, the loss read back after each iteration; 'event_item': the same with a CUDA event
    recorded before each step (as bench_train's second loop records its step's events; the two loops' wall clocks
    differ there by about 1 ms, in either direction);
    'no_sync': train.py's way between log lines, one sync at the end (the GPU never waits for the host).
    clock_log (scripts.gpu_clock.ClockLog): each way also gets the GPU's SM clock and power while it ran."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    out = {}
    for way in ("item", "event_item", "no_sync"):
        sync()
        wall0 = time.time()
        t0 = time.perf_counter()
        ends = []
        for i in range(n):
            if way == "event_item" and cuda:
                torch.cuda.Event(enable_timing=True).record()
            loss = step(i)
            if way != "no_sync":
                loss.item()
            ends.append(time.perf_counter())
        sync()
        each = [(b - a) * 1e3 for a, b in zip([t0] + ends[:-1], ends)]
        out[way] = {"mean_ms": (time.perf_counter() - t0) / n * 1e3,
                    "median_ms": statistics.median(each) if way != "no_sync" else None,
                    "clock": clock_log.window(wall0, time.time()) if clock_log is not None else None}
    return out


def settle(steps: dict, before=lambda name: None, seconds: float = 2.0) -> None:
    """Every run's step back to back, untimed, for about `seconds` in all: the GPU reaches its working clock and
    power before the first timed loop (an H200 at its 700 W limit: compiling the runs left it idle and cool, and a
    first loop at a higher clock would flatter whichever run comes first). before(name) runs before each run's steps."""
    per_run = seconds / max(1, len(steps))
    for name, step in steps.items():
        before(name)
        t0 = time.perf_counter()
        i = 0
        while time.perf_counter() - t0 < per_run:
            step(i).item()
            i += 1


def rounds_summary(rounds: list, runs: list) -> dict:
    """rounds: [{'round': r, 'run': name, 'loops': timed_loops(...)}] with every run once per round, back to back.
    Per run and way: the median over rounds of the loop's mean ms; and, where there are two runs, the ratio
    second / first (the first run's speed over the second's: nanoGPT ms / ours ms) per round and its median:
    two loops of one round ran a second apart, at about the same power state."""
    by = {(r["round"], r["run"]): r["loops"] for r in rounds}
    n_rounds = 1 + max(r["round"] for r in rounds)
    ways = ("item", "event_item", "no_sync")
    out = {"median_ms": {run: {w: statistics.median(by[(k, run)][w]["mean_ms"] for k in range(n_rounds))
                               for w in ways} for run in runs}}
    if len(runs) == 2:
        a, b = runs
        ratios = {w: [by[(k, b)][w]["mean_ms"] / by[(k, a)][w]["mean_ms"] for k in range(n_rounds)] for w in ways}
        out["ratio_per_round"] = ratios
        out["ratio_median"] = {w: statistics.median(v) for w, v in ratios.items()}
    return out


def rounds_markdown(rounds: list, summary: dict, runs: list) -> str:
    """Each round's loops (ms per iteration at the GPU's median SM clock, MHz, and power, W) and, for two runs,
    the ratio of the second's ms to the first's in each round."""
    def cell(v):
        c = v.get("clock")
        return f"{v['mean_ms']:.2f}" + (f" ({c['sm_mhz']:.0f} MHz, {c['power_w']:.0f} W)" if c else "")
    head = ["round"] + [f"{run}: {w}" for run in runs for w in ("item", "no_sync")]
    if "ratio_per_round" in summary:
        head += [f"{runs[1]} / {runs[0]}, item", "no_sync"]
    n_rounds = 1 + max(r["round"] for r in rounds)
    by = {(r["round"], r["run"]): r["loops"] for r in rounds}
    body = []
    for k in range(n_rounds):
        row = [str(k)] + [cell(by[(k, run)][w]) for run in runs for w in ("item", "no_sync")]
        if "ratio_per_round" in summary:
            row += [f"{summary['ratio_per_round'][w][k]:.3f}x" for w in ("item", "no_sync")]
        body.append(row)
    if "ratio_median" in summary:
        body.append(["median", *[f"{summary['median_ms'][run][w]:.2f}" for run in runs for w in ("item", "no_sync")],
                     *[f"**{summary['ratio_median'][w]:.3f}x**" for w in ("item", "no_sync")]])
    return ("\n## Rounds\n\nThe loops again, round by round: in each round every run's loops back to back, so "
            "that the runs compared ran seconds apart, at about the same power state (an H200 at its 700 W limit moves "
            "its SM clock between ~1,400 and 1,980 MHz). ms per iteration (the GPU's median SM clock and power over "
            "the loop, from nvidia-smi every few tens of ms, where it could be read).\n\n"
            + markdown_table(head, body) + "\n")


NANOGPT_RUN = "nanoGPT's model and loop"  # the one run that is not ours (--blas leaves it on torch's BLAS)


def our_run_name(variant, args) -> str:
    return (f"ours: {variant.label}{' RoPE' if args.rope else ''}{' (graph_step)' if args.graph_step else ''}"
            f"{' (master weights)' if args.master_weights else ''}{' ' + ' '.join(args.knob) if args.knob else ''}")


def plan_runs(args, batch_size: int, seq_len: int, device) -> dict:
    """{run name: a builder of its step}, in the rounds' order: our --variant, then nanoGPT's model (--nanogpt) or
    a second of our variants (--against), or nothing else. Checked before anything is built."""
    def one_variant(key, spec):
        chosen = select_variants(spec)
        if len(chosen) != 1:
            raise SystemExit(f"{key} takes one variant, got {spec!r}")
        return chosen[0]
    variant = one_variant("--variant", args.variant)
    runs = {our_run_name(variant, args): lambda: ours(variant, batch_size, seq_len, args, device)}
    if args.nanogpt and args.against:
        raise SystemExit("--nanogpt and --against both name the run to compare with: give one")
    if args.against:
        other = one_variant("--against", args.against)
        if other.id == variant.id:
            raise SystemExit(f"--against {args.against} is --variant itself: name another variant")
        runs[our_run_name(other, args)] = lambda: ours(other, batch_size, seq_len, args, device)
    elif args.nanogpt:
        if args.rope:
            raise SystemExit("--rope: nanoGPT's model has learned positions only; compare with --against instead")
        runs[NANOGPT_RUN] = lambda: nanogpt(Path(args.nanogpt), batch_size, seq_len, device)
    return runs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", default="mha", help="one of " + ", ".join(v.id for v in VARIANTS))
    p.add_argument("--shape", default="12x1024", help="BxT")
    p.add_argument("--nanogpt", default=None, help="nanoGPT's folder: its model in its loop beside ours")
    p.add_argument("--against", default=None, metavar="VARIANT",
                   help="a second of our variants beside --variant (instead of --nanogpt): with --rounds, its ms over "
                        "--variant's per round and the median")
    p.add_argument("--rope", action="store_true",
                   help="our models with RoPE (bench_train's --rope: MLA with decoupled RoPE, Tucker latent RoPE)")
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--iters", type=int, default=8, help="profiled iterations")
    p.add_argument("--graph_step", action="store_true",
                   help="our step replayed from one CUDA graph (train.py's graph_step; --warmup covers its plain "
                        "iterations, the capture and a replay)")
    p.add_argument("--master_weights", action="store_true",
                   help="our model's matrices in bf16 with float32 masters in master_adamw.MasterAdamW (bench_train's "
                        "--master_weights)")
    p.add_argument("--rounds", type=int, default=1,
                   help="unprofiled loops this many times, the runs alternating (their ratio per round and its median)")
    p.add_argument("--clock_ms", type=int, default=50, help="nvidia-smi's sampling interval of the GPU clock, ms")
    add_knob_arg(p)  # our modules' constants (nanoGPT's model does not use them)
    add_common_args(p, name="loop_gap")
    args = p.parse_args(argv)
    set_module_knobs(args.knob, TRAIN_KNOB_MODULES)
    args.suite, args.compile = "gpt2", True
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be >= 1, got {args.rounds}")
    if args.iters < 2:  # the first profiled iteration has no gap before it (no earlier kernel in the profile)
        raise SystemExit(f"--iters must be >= 2 (the gap before an iteration needs one before it), got {args.iters}")
    device = torch.device(args.device)
    (batch_size, seq_len), = parse_shapes(args.shape)
    runs = plan_runs(args, batch_size, seq_len, device)  # the runs' arguments checked before the GPU is
    if device.type != "cuda" or not torch.cuda.is_available():
        raise SystemExit("loop_gap measures a GPU's idle time: it needs CUDA")
    if args.graph_step and args.warmup < GRAPH_WARMUP + 2:
        raise SystemExit(f"--graph_step: --warmup must be >= {GRAPH_WARMUP + 2} ({GRAPH_WARMUP} plain iterations, "
                         "the capture, a replay)")
    torch_blas = torch.backends.cuda.preferred_blas_library()  # torch's own choice: nanoGPT's runs keep it

    def blas_for(name):  # --blas for our runs only, set around everything each run does (built, warmed, timed)
        if name != NANOGPT_RUN and args.blas != "default":
            apply_blas(args.blas)
        else:
            torch.backends.cuda.preferred_blas_library(torch_blas)

    steps = {}
    for name, build in runs.items():  # every run built and warmed first: the rounds then alternate between them
        blas_for(name)
        step = build()
        for i in range(args.warmup):
            step(i).item()
        steps[name] = step
    from scripts.gpu_clock import ClockLog
    settle(steps, blas_for)  # the GPU at its working power state before round 0 (compiling left it idle)
    rounds = []
    with ClockLog(interval_ms=args.clock_ms) as clock_log:
        for k in range(args.rounds):  # unprofiled; each round runs every step's loops back to back
            for name, step in steps.items():
                blas_for(name)
                loops = timed_loops(step, device=device, clock_log=clock_log)
                rounds.append({"round": k, "run": name, "loops": loops})
                print(f"round {k} {name}: " + ", ".join(
                    f"{w} {v['mean_ms']:.2f} ms" + (f" at {v['clock']['sm_mhz']:.0f} MHz" if v["clock"] else "")
                    for w, v in loops.items()), flush=True)
    summary = rounds_summary(rounds, list(steps))
    results = {}
    for name, step in steps.items():
        blas_for(name)
        loops = {w: {"mean_ms": ms} for w, ms in summary["median_ms"][name].items()}
        first = next(r["loops"] for r in rounds if r["run"] == name)
        for w in loops:
            loops[w]["median_ms"] = first[w]["median_ms"]
        results[name] = {"loop_ms": loops["item"]["mean_ms"], "loops": loops, **profile_loop(step, args.iters)}
        r = results[name]
        print(f"{name}: unprofiled loops (median of {args.rounds} rounds) {loops}; profiled: wall "
              f"{fmt(r['median_wall_ms'], '.2f')} ms/iter, GPU busy {fmt(r['median_busy_ms'], '.2f')}, "
              f"gap {fmt(r['median_gap_ms'], '.3f')}; "
              f"host in the gap: {r['host_in_gap_ms']}; idle inside {r['idle_inside_ms']:.3f}: {r['idle_inside_top_ms']}",
              flush=True)
    info = run_info(args, device, argv)
    body = [[name, f"{r['loop_ms']:.2f} ({r['loops']['item']['median_ms']:.2f})",
             f"{r['loops']['event_item']['mean_ms']:.2f} ({r['loops']['event_item']['median_ms']:.2f})",
             f"{r['loops']['no_sync']['mean_ms']:.2f}", fmt(r['median_wall_ms'], '.2f'), fmt(r['median_busy_ms'], '.2f'),
             fmt(r['median_gap_ms'], '.3f'),
             "; ".join(f"{k} {v:.3f}" for k, v in r["host_in_gap_ms"].items()), f"{r['idle_inside_ms']:.3f}",
             "; ".join(f"`{k}` {v:.3f}" for k, v in r["idle_inside_top_ms"].items())] for name, r in results.items()]
    md_rounds = rounds_markdown(rounds, summary, list(steps))
    md = (f"# The GPU's idle time in a training loop timed nanoGPT's way ({args.shape})\n\n{info['date']} on "
          f"{info.get('gpu', '')}, torch {torch.__version__}; median of {args.iters} profiled iterations after "
          f"{args.warmup}.\n\n`{info['command']}`\n\n"
          + f"Unprofiled loops of 20 iterations, ms per iteration, the median over {args.rounds} rounds of each loop's mean "
          "(the first round's median iteration in brackets): nanoGPT's way (the loss read back "
          "after each), the same with a CUDA event recorded before each step, and train.py's way between log lines "
          "(no sync until the end). Then the profiled iterations, nanoGPT's way.\n\n"
          + markdown_table(["run", "loop ms/iter, loss read back", "with an event before each step",
                            "no sync (train.py)", "profiled wall ms/iter", "GPU busy ms", "gap before the first kernel, ms",
                            "host top-level ops in the gap (ms per iteration)", "idle inside an iteration, ms",
                            "where (kernel before -> kernel after: ms per iteration)"], body) + "\n" + md_rounds)
    write_report(args.out_dir, args.name, md, {**info, "results": results, "rounds": rounds, "summary": summary})


if __name__ == "__main__":
    main()

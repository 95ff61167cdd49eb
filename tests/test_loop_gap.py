"""scripts/loop_gap.py's analysis on synthetic profiler events (the script itself needs a GPU): the GPU's busy
time as the union of its kernels, the gap before each iteration's first kernel, and the host operations
that ran in those gaps."""
import types

import pytest
import torch
from torch.autograd import DeviceType

from scripts import loop_gap


def ev(name, device, start, end, parent=None):
    return types.SimpleNamespace(name=name, device_type=device, time_range=types.SimpleNamespace(start=start, end=end),
                                 cpu_parent=parent, is_user_annotation=False)


def test_busy_union_merges_overlaps():
    assert loop_gap.busy_union([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17
    assert loop_gap.busy_union([(20, 25), (5, 12), (21, 22), (0, 10)]) == 17  # in any order (streams interleave)
    assert loop_gap.busy_union([]) == 0


def test_analyse_finds_the_gap_and_what_the_host_did():
    C, G = DeviceType.CPU, DeviceType.CUDA
    # iteration 1: host 0..1000, kernels 100..900; iteration 2: host 1000..2000, its first kernel at 1400
    # (the GPU idle 900..1400 while the host ran 'aten::item' to 1050 and 'Torch-Compiled Region' from 1050)
    region = ev("Torch-Compiled Region", C, 1050, 1500)
    events = [ev("k1", G, 100, 500), ev("k2", G, 450, 900), ev("aten::item", C, 880, 1050),
              region, ev("aten::mm", C, 1100, 1200, parent=region),  # not top-level: not counted
              ev("k3", G, 1400, 1900), ev("ProfilerStep#1", G, 0, 2000), ev("Optimizer.step#AdamW.step", G, 0, 900)]
    out = loop_gap.analyse(events, [0, 1000, 2000])
    first, second = out["iterations"]
    assert first["gpu_busy_ms"] == 0.8 and first["gap_before_ms"] is None and first["kernels"] == 2
    assert second["gap_before_ms"] == 0.5 and second["wall_ms"] == 1.0 and second["kernels"] == 1
    assert out["host_in_gap_ms"] == {"Torch-Compiled Region": 0.35, "aten::item": 0.15}
    assert out["idle_inside_ms"] == 0  # k1/k2 overlap; the only idle stretch spans an iteration boundary


def test_analyse_names_idle_stretches_inside_an_iteration():
    C, G = DeviceType.CPU, DeviceType.CUDA
    it = ev("loop_gap.iter", C, 0, 1000)
    events = [it, ev("fwd_kernel", G, 10, 300), ev("bwd_kernel", G, 500, 900),
              ev("Optimizer.step#AdamW.step", C, 300, 480, parent=it)]
    out = loop_gap.analyse(events, [0, 1000])
    assert out["idle_inside_ms"] == 0.2 and out["idle_inside_top_ms"] == {"fwd_kernel -> bwd_kernel": 0.2}
    # kernel names of up to 60 characters are shown whole, longer ones cut to 60 with '...'
    assert loop_gap._short("k" * 60) == "k" * 60 and loop_gap._short("k" * 61) == "k" * 57 + "..."


def test_analyse_medians_boundaries_and_host_ops_per_gap():
    """Three iterations (host marks 0, 1000, 2200, 3100 µs): the medians are the middle iteration's, not an extreme
    one's; a kernel starting exactly at a mark is the new iteration's alone, and the GPU idle up to it is a gap
    before that iteration, not idle inside one; an idle stretch of exactly 20 µs inside an iteration counts, per
    iteration; host ops under the loop's own 'loop_gap.iter' ranges are top-level (the ranges themselves are not
    ops), and host_in_gap keeps the top_n largest, ms per gap."""
    C, G = DeviceType.CPU, DeviceType.CUDA
    it1, it2, it3 = ev("loop_gap.iter", C, 0, 1000), ev("loop_gap.iter", C, 1000, 2200), ev("loop_gap.iter", C, 2200, 3100)
    region = ev("Torch-Compiled Region", C, 1400, 2300)
    events = [it1, it2, it3, region,
              ev("kA", G, 100, 400), ev("kB", G, 1000, 1500), ev("kC", G, 2500, 2600), ev("kD", G, 2620, 2800),
              ev("aten::item", C, 350, 1000, parent=it1), ev("aten::item", C, 1450, 1520, parent=it2),
              ev("aten::mm", C, 1600, 1700, parent=region)]  # under the compiled region: not top-level
    out = loop_gap.analyse(events, [0, 1000, 2200, 3100], top_n=1)
    its = out["iterations"]
    assert [r["kernels"] for r in its] == [1, 1, 2]
    assert [r["gap_before_ms"] for r in its] == [None, pytest.approx(0.6), pytest.approx(1.0)]
    assert out["median_wall_ms"] == pytest.approx(1.0)  # walls 1.0, 1.2, 0.9
    assert out["median_busy_ms"] == pytest.approx(0.3)  # busy 0.3, 0.5, 0.28
    assert out["median_gap_ms"] == pytest.approx(0.8)
    assert out["idle_inside_ms"] == pytest.approx(0.02 / 3)  # kC -> kD, 20 µs, over three iterations
    assert out["idle_inside_top_ms"] == {"kC -> kD": pytest.approx(0.02 / 3)}
    # gaps 400..1000 and 1500..2500: aten::item 0.6 + 0.02 ms, the region 0.8 ms, over 2 gaps; top_n=1: the region
    assert out["host_in_gap_ms"] == {"Torch-Compiled Region": pytest.approx(0.4)}
    both = loop_gap.analyse(events, [0, 1000, 2200, 3100])["host_in_gap_ms"]
    assert both == {"Torch-Compiled Region": pytest.approx(0.4), "aten::item": pytest.approx(0.31)}


def test_timed_loops_runs_each_way():
    """Three loops of n steps each: the loss read back in the first two (nanoGPT's way, with an event), not in the
    third (train.py's); each reports its mean, the first two their median."""
    import torch
    calls, reads = [], []

    class Loss:
        def item(self):
            reads.append(len(calls))
            return 1.0

    def step(i):
        calls.append(i)
        return Loss()

    out = loop_gap.timed_loops(step, n=4, device=torch.device("cpu"))
    assert calls == [0, 1, 2, 3] * 3 and len(reads) == 8  # no read-back in the no_sync loop
    assert set(out) == {"item", "event_item", "no_sync"} and all(v["mean_ms"] > 0 for v in out.values())
    assert out["item"]["median_ms"] > 0 and out["event_item"]["median_ms"] > 0 and out["no_sync"]["median_ms"] is None


def test_settle_runs_every_step_for_its_share_of_the_time():
    """Before the rounds every run's step runs back to back, untimed, for its share of the time, its `before` hook
    (the run's --blas) first."""
    seen, hooks = {"a": 0, "b": 0}, []

    class Loss:
        def item(self):
            return 1.0

    def make(name):
        def step(i):
            seen[name] += 1
            return Loss()
        return step

    loop_gap.settle({"a": make("a"), "b": make("b")}, before=hooks.append, seconds=0.05)
    assert hooks == ["a", "b"] and seen["a"] > 0 and seen["b"] > 0


def _loops(item, no_sync, mhz=None):
    clock = {"sm_mhz": mhz, "sm_mhz_min": mhz, "power_w": 690.0, "samples": 5} if mhz else None
    return {"item": {"mean_ms": item, "median_ms": item, "clock": clock},
            "event_item": {"mean_ms": item + 0.1, "median_ms": item, "clock": clock},
            "no_sync": {"mean_ms": no_sync, "median_ms": None, "clock": clock}}


def test_rounds_summary_ratio_per_round_and_medians():
    runs = ["ours", "nanogpt"]
    rounds = [{"round": 0, "run": "ours", "loops": _loops(24.0, 23.0, 1800)},
              {"round": 0, "run": "nanogpt", "loops": _loops(27.6, 25.3, 1800)},
              {"round": 1, "run": "ours", "loops": _loops(25.0, 24.0, 1700)},
              {"round": 1, "run": "nanogpt", "loops": _loops(26.25, 25.2, 1750)},
              {"round": 2, "run": "ours", "loops": _loops(30.0, 24.5)},
              {"round": 2, "run": "nanogpt", "loops": _loops(33.0, 26.95)}]
    s = loop_gap.rounds_summary(rounds, runs)
    assert s["median_ms"]["ours"]["item"] == 25.0 and s["median_ms"]["nanogpt"]["item"] == 27.6
    assert s["ratio_per_round"]["item"] == pytest.approx([1.15, 1.05, 1.10])  # nanoGPT ms / ours ms, same round
    assert s["ratio_median"]["item"] == pytest.approx(1.10)
    assert s["ratio_per_round"]["no_sync"] == pytest.approx([1.10, 1.05, 1.10])  # 25.3/23, 25.2/24, 26.95/24.5
    assert s["ratio_median"]["no_sync"] == pytest.approx(1.10)
    md = loop_gap.rounds_markdown(rounds, s, runs)
    assert "| 0 | 24.00 (1800 MHz, 690 W) |" in md and "**1.100x**" in md
    assert "| 2 | 30.00 |" in md  # no clock where none was read
    one = loop_gap.rounds_summary(rounds[:1] + rounds[2:3], ["ours"])
    assert "ratio_median" not in one and one["median_ms"]["ours"]["item"] == 24.5  # rounds 0 and 1: 24, 25
    assert "x**" not in loop_gap.rounds_markdown(rounds[:1] + rounds[2:3], one, ["ours"])


def test_rounds_markdown_rows_name_the_ratio_and_the_median_clock():
    """The rounds' table: a column per run and way, each cell the loop's ms at the median SM clock (not its lowest)
    and power; the ratio columns named second run over first, each round's own ratio in its row; a last row of
    every run's median ms and the median ratios."""
    def loops(item, no_sync):
        clock = {"sm_mhz": 1800.0, "sm_mhz_min": 1500.0, "power_w": 690.0, "samples": 5}
        return {w: {"mean_ms": ms, "median_ms": ms, "clock": clock}
                for w, ms in (("item", item), ("event_item", item), ("no_sync", no_sync))}
    runs = ["ours", "nanogpt"]
    times = [((20.0, 19.0), (22.0, 19.95)), ((25.0, 24.0), (26.25, 25.2)), ((30.0, 29.0), (33.0, 30.45))]
    rounds = [{"round": k, "run": run, "loops": loops(*t)} for k, pair in enumerate(times) for run, t in zip(runs, pair)]
    s = loop_gap.rounds_summary(rounds, runs)
    lines = loop_gap.rounds_markdown(rounds, s, runs).splitlines()
    assert "| round | ours: item | ours: no_sync | nanogpt: item | nanogpt: no_sync | nanogpt / ours, item | no_sync |" \
        in lines
    assert "| 0 | 20.00 (1800 MHz, 690 W) | 19.00 (1800 MHz, 690 W) | 22.00 (1800 MHz, 690 W) | 19.95 (1800 MHz, 690 W) " \
           "| 1.100x | 1.050x |" in lines
    assert any(line.startswith("| 1 | 25.00 (1800") and line.endswith("| 1.050x | 1.050x |") for line in lines)
    assert "| median | 25.00 | 24.00 | 26.25 | 25.20 | **1.100x** | **1.050x** |" in lines


def test_timed_loops_reads_the_clock_log_per_way():
    class Log:
        windows = []

        def window(self, t0, t1):
            self.windows.append((t0, t1))
            return {"sm_mhz": 1900.0}

    log = Log()
    out = loop_gap.timed_loops(lambda i: torch.zeros(()), n=2, device=torch.device("cpu"), clock_log=log)
    assert [v["clock"] for v in out.values()] == [{"sm_mhz": 1900.0}] * 3
    assert len(log.windows) == 3 and all(a <= b for a, b in log.windows)
    assert log.windows[0][1] <= log.windows[1][0]  # one window per way, in order


def test_rounds_must_be_positive():
    with pytest.raises(SystemExit, match="--rounds"):
        loop_gap.main(["--rounds", "0"])  # refused before anything needs a GPU


@pytest.mark.parametrize("iters", ["0", "1"])
def test_iters_must_leave_a_gap_to_measure(iters):
    """One profiled iteration has no gap before it (no earlier kernel in the profile): refused before any GPU work,
    where it used to end in a TypeError formatting the missing median after every run had been timed."""
    with pytest.raises(SystemExit, match="--iters must be >= 2"):
        loop_gap.main(["--iters", iters])


def test_a_profile_without_a_gap_reports_a_dash():
    """analyse over one iteration finds no gap (None); the report's cells (loop_gap.fmt) show '-' for it, numbers as
    before."""
    out = loop_gap.analyse([ev("k1", DeviceType.CUDA, 100, 500)], [0, 1000])
    assert out["median_gap_ms"] is None and out["median_wall_ms"] == 1.0
    assert loop_gap.fmt(out["median_gap_ms"], ".3f") == "-"
    assert loop_gap.fmt(out["median_wall_ms"], ".2f") == "1.00" and loop_gap.fmt(0.0, ".3f") == "0.000"


def plan_args(*argv):
    import argparse
    p = argparse.ArgumentParser()
    for flag in ("--graph_step", "--master_weights", "--rope"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--variant", default="mha")
    p.add_argument("--against", default=None)
    p.add_argument("--nanogpt", default=None)
    p.add_argument("--knob", action="append", default=[])
    return p.parse_args(argv)


def test_against_runs_two_of_our_variants_in_order(monkeypatch):
    """--against: the rounds alternate --variant's step and the other's (its ms over --variant's is the ratio), both
    built by ours() with the same shape and flags, RoPE included; nothing is built while planning."""
    built = []
    monkeypatch.setattr(loop_gap, "ours", lambda v, b, t, args, device: built.append((v.id, b, t, args.rope)))
    args = plan_args("--variant", "mha", "--against", "mla_shared128", "--rope", "--graph_step")
    runs = loop_gap.plan_runs(args, 12, 1024, torch.device("cpu"))
    assert list(runs) == ["ours: MHA RoPE (graph_step)", "ours: MLA shared K,V [dcK,dcQ=128] RoPE (graph_step)"]
    assert built == []
    for build in runs.values():
        build()
    assert built == [("mha", 12, 1024, True), ("mla_shared128", 12, 1024, True)]
    assert list(loop_gap.plan_runs(plan_args(), 12, 1024, None)) == ["ours: MHA"]  # alone: no ratio
    # every setting that changes our step is in its run's name (the tables' row and the JSON's key)
    named = loop_gap.plan_runs(plan_args("--master_weights", "--knob", "fused_gelu.BLOCK=4096", "--knob",
                                         "TENSORS_PER_LAUNCH=16"), 12, 1024, None)
    assert list(named) == ["ours: MHA (master weights) fused_gelu.BLOCK=4096 TENSORS_PER_LAUNCH=16"]


@pytest.mark.parametrize("argv, match", [
    (["--nanogpt", "x", "--against", "gqa4"], "--nanogpt and --against"),
    (["--against", "mha"], "is --variant itself"),
    (["--nanogpt", "x", "--rope"], "learned positions only"),
    (["--against", "gqa4,mqa"], "--against takes one variant"),
    (["--against", "tucker"], "unknown variant 'tucker'")])
def test_runs_to_compare_are_checked(argv, match):
    with pytest.raises(SystemExit, match=match):
        loop_gap.plan_runs(plan_args(*argv), 12, 1024, None)
    with pytest.raises(SystemExit, match=match):
        loop_gap.main(argv)  # refused before anything needs a GPU

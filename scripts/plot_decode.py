"""A bench_decode run as one figure: each variant's time per decode step against the cached context, at each batch
size, for the model's default step and the one-launch step, and how many times faster than MHA's default step each
variant's faster step is.

    python -m scripts.plot_decode results/bench/session56/call1/decode_final.json --out results/bench/decode_final.png

Panels: one per batch size (ms a step, log-log; a color a variant, a line style and marker a mode: with the modes
`graph_default,graph_mega`, the default step dashed and the one launch solid; the first panel's key names them),
then, at the largest batch,
MHA's default step (`graph_default`; in a run without it, MHA's `graph_merged`, `graph`, `graph_sdpa`, `step` or
`forward`, the first measured) over each variant's fastest mode (x faster). Failed cases (bench_decode's `status`
other than ok) are left out.
Without matplotlib it writes nothing and says so.
"""
import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Optional

if __name__ == "__main__" and not __package__:  # run as a file: the repository's modules are importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoint import figure_cli, read_json_args, save_figure  # noqa: E402

REF_VARIANT, REF_MODE = "mha", "graph_default"  # the speed-ups' reference: MHA's default decode step (what
#                                                 generate and sample.py run)
# where the run has no MHA row in REF_MODE, the first of these it has: graph_merged is the same step for MHA (runs
# before session 56 measured it under that name), bench_decode's default modes end in graph
REF_FALLBACK = ("graph_merged", "graph", "graph_sdpa", "step", "forward")


def reference_mode(rows: list) -> Optional[str]:
    """The mode of MHA's rows the speed-ups are taken against: REF_MODE, else the first of REF_FALLBACK the run
    measured, else any; None without a measured MHA row."""
    have = [r["mode"] for r in rows if r["status"] == "ok" and r["variant"] == REF_VARIANT]
    for mode in (REF_MODE, *REF_FALLBACK):
        if mode in have:
            return mode
    return have[0] if have else None


def curves(rows: list, batch: int) -> dict:
    """{(label, mode): [(context, ms a step), ...] by context} of the run's ok rows at `batch`."""
    out = defaultdict(list)
    for r in rows:
        if r["status"] == "ok" and r["batch_size"] == batch:
            out[(r["label"], r["mode"])].append((r["context"], r["latency_ms"]))
    return {k: sorted(v) for k, v in out.items()}


def speedups(rows: list, batch: int, ref_variant: str = REF_VARIANT, ref_mode: str = REF_MODE) -> dict:
    """{label: [(context, ref ms / the variant's fastest ms over its modes), ...]} at `batch`, where the reference
    (ref_variant in ref_mode at the same context) was measured."""
    ok = [r for r in rows if r["status"] == "ok" and r["batch_size"] == batch]
    ref = {r["context"]: r["latency_ms"] for r in ok if r["variant"] == ref_variant and r["mode"] == ref_mode}
    best = defaultdict(dict)  # label -> context -> fastest ms
    for r in ok:
        if r["context"] in ref:
            at = best[r["label"]]
            at[r["context"]] = min(at.get(r["context"], float("inf")), r["latency_ms"])
    return {label: [(c, ref[c] / ms) for c, ms in sorted(at.items())] for label, at in best.items()}


# a mode's line: the run's first mode dashed, its last solid, any between these (a run of bench_decode's default
# modes, forward,step,graph_sdpa,graph, has four), each with its own marker
MIDDLE_LINES = (":", "-.", (0, (5, 2, 1, 2, 1, 2)), (0, (1, 4)))
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")


def mode_styles(modes: list) -> dict:
    """{mode: (line style, marker)} for the run's modes in its order, no two alike (a run of one mode: solid)."""
    lines = ["-"] if len(modes) == 1 else ["--", *(MIDDLE_LINES[i % len(MIDDLE_LINES)]
                                                   for i in range(len(modes) - 2)), "-"]
    return {mode: (line, MARKERS[i % len(MARKERS)]) for i, (mode, line) in enumerate(zip(modes, lines))}


def plot(run: dict, path: Path) -> bool:
    """The figure of a bench_decode JSON (its `rows`) into path; False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FormatStrFormatter
    except ImportError:
        return False
    rows = run["rows"]
    batches = sorted({r["batch_size"] for r in rows if r["status"] == "ok"})
    modes = list(dict.fromkeys(r["mode"] for r in rows))  # in the run's order
    labels = list(dict.fromkeys(r["label"] for r in rows))
    color = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    styles = mode_styles(modes)
    fig, axes = plt.subplots(1, len(batches) + 1, figsize=(5.2 * (len(batches) + 1), 4.6))
    for ax, batch in zip(axes, batches):
        for (label, mode), pts in curves(rows, batch).items():
            line, marker = styles[mode]
            ax.plot(*zip(*pts), linestyle=line, marker=marker, ms=3, lw=1.2, color=color[label])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            axis(FormatStrFormatter("%.2g"))
        ax.set_xlabel("cached tokens a sequence")
        ax.set_ylabel("ms a decode step")
        ax.set_title(f"batch {batch}")
        ax.grid(True, which="both", lw=0.3)
    if len(modes) > 1:  # the modes' key, in gray (the colors are the variants', keyed in the last panel)
        axes[0].legend(handles=[plt.Line2D([], [], linestyle=line, marker=marker, ms=3, lw=1.2, color="0.35",
                                           label=mode) for mode, (line, marker) in styles.items()],
                       fontsize="x-small", title="mode", title_fontsize="x-small")
    ax = axes[-1]
    ref_mode = reference_mode(rows)
    for label, pts in (speedups(rows, batches[-1], ref_mode=ref_mode) if ref_mode else {}).items():
        ax.plot(*zip(*pts), "-", marker="o", ms=3, lw=1.2, color=color[label], label=label)
    if ref_mode is None:
        ax.text(0.5, 0.5, f"no {REF_VARIANT.upper()} row to compare with", ha="center", transform=ax.transAxes)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("cached tokens a sequence")
    ax.set_ylabel(f"x faster than {REF_VARIANT.upper()}'s {ref_mode or REF_MODE} step")
    ax.set_title(f"batch {batches[-1]}: the fastest mode of each")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize="x-small")  # the variants' colors, the same in every panel
    fig.suptitle(f"decode step, {run.get('gpu', '?')}, torch {run.get('torch', '?')}", fontsize="medium")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json", type=Path, help="a bench_decode JSON (its `rows`)")
    p.add_argument("--out", type=Path, default=None, help="the PNG (default: beside the JSON, .png)")
    args = p.parse_args(argv)
    runs = read_json_args("plot_decode", [args.json], "bench_decode JSON")
    if runs is None:
        return 1
    run = runs[0]
    if not any(r["status"] == "ok" for r in run.get("rows", [])):
        print(f"plot_decode: {args.json} has no measured case", file=sys.stderr)
        return 1
    out = args.out or args.json.with_suffix(".png")
    return figure_cli("plot_decode", lambda path: plot(run, path), out)


if __name__ == "__main__":
    sys.exit(main())

"""Where a training step's time goes, as one figure: every profiled row of one or more bench_train JSONs as a bar of
its GPU kernel time a step by category (matmul, attention, inductor's fused kernels, ...), stacked, with the rest of
the event-timed step (the GPU idle between kernels) hatched after them, and the step's ms and its ratio to the
reference variant's step of the same shape and positions written beside the bar.

    python -m scripts.plot_train results/bench/session25/call2/train_profile.json \\
        results/bench/session31/call2/train_llama1b_profile.json --out results/bench/train_profile.png

One panel per JSON (bench_train --profile VARIANTS: the rows of those variants carry a `profile`). The reference
is --ref if given, else the run's first variant (bench_train's suites list MHA or GQA-8 first); a row whose shape and
positions have no profiled reference row gets no ratio. Rows without a profile, and failed or skipped rows, are left
out. A profile measured at another GPU clock than the timed loop can sum to more than the step: no idle then.
Without matplotlib it writes nothing and says so.
"""
import argparse
import sys
from pathlib import Path
from typing import List, Optional

if __name__ == "__main__" and not __package__:  # run as a file: the repository's modules are importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoint import figure_cli, read_json_args, save_figure  # noqa: E402

# bench_train's kernel categories (scripts/bench_train.py's classification), in the bars' order, with fixed colors
CATEGORIES = ("matmul", "attention", "fused (triton)", "other", "optimizer", "memory")
COLORS = dict(zip(CATEGORIES, ("#4c72b0", "#dd8452", "#55a868", "#8172b3", "#c44e52", "#937860")))
IDLE = "idle"  # the event-timed step less the kernels' sum, where positive


def row_name(row: dict) -> str:
    """'MHA 12x1024 RoPE': the variant's label, the shape, and RoPE where the row used it."""
    rope = (row.get("config") or {}).get("pos_emb") == "rope"
    return f"{row['label']} {row['shape']}" + (" RoPE" if rope else "")


def bars(run: dict, ref: Optional[str] = None) -> List[dict]:
    """The run's profiled ok rows in its order, each {name, variant, step_ms, parts: {category: ms a step} (kernel
    categories in CATEGORIES' order, then any other, then IDLE where the step is longer than its kernels), ratio: step
    over the reference variant's step of the same shape and positions (None without one)}."""
    rows = [r for r in run.get("rows", []) if r.get("status") == "ok" and r.get("profile")]
    ref = ref or (run["rows"][0]["variant"] if run.get("rows") else None)
    key = lambda r: (r["shape"], (r.get("config") or {}).get("pos_emb"))  # noqa: E731
    ref_ms = {key(r): r["total_ms"] for r in rows if r["variant"] == ref}
    out = []
    for r in rows:
        cats = r["profile"]["categories"]
        order = [c for c in CATEGORIES if c in cats] + [c for c in cats if c not in CATEGORIES]
        parts = {c: cats[c]["ms"] for c in order}
        idle = r["total_ms"] - sum(parts.values())
        if idle > 0:
            parts[IDLE] = idle
        ref_step = ref_ms.get(key(r))
        out.append(dict(name=row_name(r), variant=r["variant"], step_ms=r["total_ms"], parts=parts,
                        ratio=None if ref_step is None else r["total_ms"] / ref_step))
    return out


def plot(runs: List[dict], path: Path, ref: Optional[str] = None) -> bool:
    """The figure of bench_train JSONs into path, one panel each; False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels = [(run, bars(run, ref)) for run in runs]
    heights = [max(len(b), 1) for _, b in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10.5, 1.1 + 0.42 * sum(heights) + 0.9 * len(panels)),
                             gridspec_kw=dict(height_ratios=heights), squeeze=False)
    seen = {}  # category -> a bar segment, for one legend
    for ax, (run, bs) in zip(axes[:, 0], panels):
        ys = range(len(bs))[::-1]  # the run's first row on top
        for y, b in zip(ys, bs):
            left = 0.0
            for cat, ms in b["parts"].items():
                idle = cat == IDLE
                seg = ax.barh(y, ms, left=left, height=0.7, color="white" if idle else COLORS.get(cat, "#bbbbbb"),
                              edgecolor="#777777" if idle else "white", hatch="///" if idle else None, lw=0.5)
                seen.setdefault(cat, seg)
                left += ms
            note = f" {b['step_ms']:.2f} ms" + ("" if b["ratio"] is None else f", {b['ratio']:.3f}x")
            ax.text(max(left, b["step_ms"]), y, note, va="center", fontsize="x-small")
        ax.set_yticks(list(ys), [b["name"] for b in bs], fontsize="small")
        ax.set_xlim(0, 1.22 * max((max(sum(b["parts"].values()), b["step_ms"]) for b in bs), default=1.0))
        ax.set_xlabel("ms a step (GPU kernels by category, profiled)")
        suite = (run.get("args") or {}).get("suite", "")
        refname = ref or (run["rows"][0]["variant"] if run.get("rows") else "?")
        ax.set_title(f"{suite} on {run.get('gpu', '?')}, torch {run.get('torch', '?')}, {str(run.get('date', ''))[:10]}"
                     f" (ratios: x the {refname} row of the same shape and positions)", fontsize="small")
        ax.grid(True, axis="x", lw=0.3)
    fig.legend(list(seen.values()), list(seen.keys()), loc="lower center", ncol=len(seen), fontsize="small",
               frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save_figure(fig, path, dpi=110)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json", type=Path, nargs="+", help="bench_train JSONs with profiled rows (--profile)")
    p.add_argument("--out", type=Path, default=None, help="the PNG (default: beside the first JSON, .png)")
    p.add_argument("--ref", default=None, help="the variant id the ratios are taken against (default: each run's first)")
    args = p.parse_args(argv)
    runs = read_json_args("plot_train", args.json, "bench_train JSON")
    if runs is None:
        return 1
    empty = [str(path) for path, run in zip(args.json, runs) if not bars(run, args.ref)]
    if empty:
        print(f"plot_train: no profiled row in {', '.join(empty)} (bench_train --profile VARIANTS)", file=sys.stderr)
        return 1
    out = args.out or args.json[0].with_suffix(".png")
    return figure_cli("plot_train", lambda path: plot(runs, path, args.ref), out)


if __name__ == "__main__":
    sys.exit(main())

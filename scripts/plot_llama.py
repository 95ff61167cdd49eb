"""The paper's LLaMA-3 1B timing table against ours, as one figure: for every row of tab:owt2_llama1b_timing, its
training iteration time over GQA-8's as the paper reports it (4 H100s, GPT-NeoX) beside ours from one or more
`bench_train --suite llama1b` JSONs (each ratio within its own run), and the row's FLOPs over GQA-8's (our count,
`flops_per_token`), which is where a row's time would sit if every FLOP cost the same.

    python -m scripts.plot_llama results/bench/session32/call2/train_llama1b_act_ckpt_all.json \\
        --out results/bench/llama1b_vs_paper.png

Rows in the paper's order; a row a run did not measure (or that failed) has no bar of that run. A run without an ok
GQA-8 row has no ratios and is refused. Without matplotlib it writes nothing and says so.
"""
import argparse
import itertools
import sys
from pathlib import Path
from typing import Dict, List, Optional

if __name__ == "__main__" and not __package__:  # run as a file: the repository's modules are importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoint import figure_cli, read_json_args, save_figure  # noqa: E402
from scripts.paper_tables import TABLES  # noqa: E402

REF = "gqa8"  # the paper's table gives its ratios against GQA-8


def paper_ratios() -> Dict[str, float]:
    """Row id -> the paper's train iteration time over GQA-8's, in the table's row order."""
    rows = TABLES["llama1b"].rows
    ref = next(r for r in rows if r.id == REF).paper["on"]["train_iter_ms"]
    return {r.id: r.paper["on"]["train_iter_ms"] / ref for r in rows}


def run_ratios(run: dict) -> Optional[Dict[str, dict]]:
    """Row id -> {time: iteration ms over GQA-8's, flops: FLOPs a token over GQA-8's (None without the counts)} for
    the run's ok rows; None without an ok GQA-8 row (nothing to take the ratios against)."""
    ok = {r["variant"]: r for r in run.get("rows", []) if r.get("status") == "ok" and r.get("total_ms")}
    ref = ok.get(REF)
    if ref is None:
        return None

    def flops(r):  # None where a row (or GQA-8's) has no FLOP count
        return r["flops_per_token"] / ref["flops_per_token"] if r.get("flops_per_token") and ref.get(
            "flops_per_token") else None
    return {v: dict(time=r["total_ms"] / ref["total_ms"], flops=flops(r)) for v, r in ok.items()}


def run_name(run: dict, source: str = "") -> str:
    """'ours, H200, activation checkpointing (train_llama1b)': what distinguishes one run's bars from another's, the
    file's name last (two runs of the same settings)."""
    a = run.get("args") or {}
    gpu = str(run.get("gpu", "?")).replace("NVIDIA ", "")
    how = ", activation checkpointing" if a.get("act_ckpt") else ""
    how += ", graph step" if a.get("graph_step") else ""
    return f"ours, {gpu}{how}" + (f" ({source})" if source else "")


def plot(runs: List[dict], path: Path, sources: Optional[List[str]] = None) -> bool:
    """The figure into path (sources: a name per run for its legend entry); False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    paper = paper_ratios()
    labels = {r.id: r.label for r in TABLES["llama1b"].rows}
    ours = [run_ratios(run) for run in runs]
    flops = {v: x["flops"] for o in ours for v, x in o.items() if x["flops"]}  # the model's count: any run's
    colors = itertools.cycle(("#4c72b0", "#55a868", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974"))
    series = [("paper (4 H100, GPT-NeoX)", paper, "#c44e52")]
    series += [(run_name(run, source), {v: x["time"] for v, x in o.items()}, color)
               for run, o, source, color in zip(runs, ours, sources or [""] * len(runs), colors)]
    series.append(("FLOPs (ours)", flops, "#bbbbbb"))
    ids = list(paper)
    height = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(9.5, 1.2 + 0.32 * len(ids) * len(series) / 2))
    for k, (name, values, color) in enumerate(series):
        ys = [len(ids) - 1 - i + 0.4 - (k + 0.5) * height for i in range(len(ids))]
        got = [(y, v, values[v]) for y, v in zip(ys, ids) if v in values]
        ax.barh([y for y, _, _ in got], [x - 1.0 for _, _, x in got], left=1.0, height=height, color=color, label=name)
        for y, _, x in (g for g in got if g[1] != REF):  # GQA-8's own row is 1 in every series
            ax.text(x + (0.004 if x >= 1 else -0.004), y, f"{x:.3f}", va="center", ha="left" if x >= 1 else "right",
                    fontsize=6.5)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks([len(ids) - 1 - i for i in range(len(ids))], [labels[v] for v in ids], fontsize="small")
    ax.set_xlabel("training iteration time over GQA-8's (< 1: faster than GQA-8)")
    ax.set_title("LLaMA-3 1B at N = 4096, the paper's tab:owt2_llama1b_timing: time x GQA-8", fontsize="small")
    ax.grid(True, axis="x", lw=0.3)
    shown = [values[v] for _, values, _ in series for v in ids if v in values]  # rows of the paper's table only
    lo, hi = min(shown), max(shown)
    ax.set_xlim(lo - 0.06, hi + 0.06)
    ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=2, frameon=False)  # below
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json", type=Path, nargs="+", help="bench_train --suite llama1b JSONs")
    p.add_argument("--out", type=Path, default=None, help="the PNG (default: beside the first JSON, .png)")
    args = p.parse_args(argv)
    runs = read_json_args("plot_llama", args.json, "bench_train JSON")
    if runs is None:
        return 1
    bad = [str(path) for path, run in zip(args.json, runs)
           if (run.get("args") or {}).get("suite") != "llama1b" or run_ratios(run) is None]
    if bad:
        print(f"plot_llama: no llama1b run with an ok GQA-8 row in {', '.join(bad)} "
              "(bench_train --suite llama1b, gqa8 among --variants)", file=sys.stderr)
        return 1
    out = args.out or args.json[0].with_suffix(".png")
    return figure_cli("plot_llama", lambda path: plot(runs, path, [p.stem for p in args.json]), out)


if __name__ == "__main__":
    sys.exit(main())

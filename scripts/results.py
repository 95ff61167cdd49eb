"""
Collect the runs of a paper table into a results table beside the paper's numbers, plus
Pareto plots (val loss against attention parameters and against KV cache).

    python -m scripts.results shakespeare
    python -m scripts.results owt --runs results/owt/runs --out results/owt

Reads <runs>/<row_id>-rope_<off|on>-s<seed>/summary.json (the layout scripts/sweep.py
writes), groups the seeds of a (row, RoPE) pair (mean, and sample std when there are
several) and writes into <out>:

    table.md                 ours beside the paper's, with differences; missing runs show '—'
                             (owt: plus the zero-shot columns, from each run's zeroshot.json
                             written by scripts/eval_zeroshot.py, mean over seeds)
    table.json               the same numbers, machine-readable
    pareto_attn_params.png   val loss vs attention params [MB], log x; ours filled, paper hollow
    pareto_kv_cache.png      val loss vs KV cache, log x

Val loss is each run's best_val_loss (the paper reports the best validation loss of a run);
only runs whose summary says finished=true count unless --include-unfinished.
"""
import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if not __package__:  # run as a file, the repository's modules are not importable
    sys.exit("run from the repository root as a module: python -m scripts.results ...")

from scripts.paper_tables import OWT_COLUMNS, ROPE_SETTINGS, TABLES  # noqa: E402

RUN_DIR_RE = re.compile(r"^(?P<row>.+)-rope_(?P<rope>off|on)-s(?P<seed>-?\d+)$")
DASH = "—"
ZERO_SHOT_COLUMNS = tuple(c for c in OWT_COLUMNS if c.endswith(("_ppl", "_acc")))  # owt only
ZERO_SHOT_HEADERS = ("WikiText2 ppl", "LAMBADA ppl", "Mean ppl", "LAMBADA acc", "CBT-CN", "CBT-NE",
                     "HellaSwag", "WinoGrande", "PIQA", "ARC-E", "ARC-C", "Mean acc")

# one colour and marker per method family (same in every plot)
FAMILY_STYLE = {
    "MHA": ("black", "o"),
    "GQA": ("tab:blue", "s"),
    "MLA separated": ("tab:orange", "^"),
    "MLA shared": ("tab:red", "v"),
    "MLA shared, latent RoPE": ("tab:pink", "<"),
    "MLA full query": ("tab:brown", ">"),
    "Tucker separated": ("tab:green", "D"),
    "Tucker shared": ("tab:olive", "P"),
}


# -----------------------------------------------------------------------------
# collecting


def load_summaries(runs_dir: Path, include_unfinished=False):
    """{(row_id, rope): [summary, ...]} of the runs found under runs_dir."""
    found = {}
    if not runs_dir.is_dir():
        return found
    for d in sorted(runs_dir.iterdir()):
        m = RUN_DIR_RE.match(d.name)
        f = d / "summary.json"
        if not m:
            continue
        if not f.is_file():
            # a run killed before its summary (e.g. at a time limit): with --include-unfinished,
            # read its best val loss from log.jsonl and its config from config.json
            s = _summary_from_log(d) if include_unfinished else None
            if s is None:
                continue
        else:
            try:
                s = json.loads(f.read_text())
            except ValueError:
                print(f"warning: unreadable {f}", file=sys.stderr)
                continue
        if not (s.get("finished") or include_unfinished):
            continue
        s["_run"] = d.name
        z = d / "zeroshot.json"  # scripts/eval_zeroshot.py, run after training (owt)
        if z.is_file():
            try:
                s["_zeroshot"] = json.loads(z.read_text()).get("row") or {}
            except ValueError:
                print(f"warning: unreadable {z}", file=sys.stderr)
        s["_seed"] = int(m["seed"])
        found.setdefault((m["row"], m["rope"]), []).append(s)
    return found


def _summary_from_log(d: Path):
    """A partial summary of an interrupted run from its log.jsonl and config.json (None if absent)."""
    log, cfg = d / "log.jsonl", d / "config.json"
    if not (log.is_file() and cfg.is_file()):
        return None
    evals = [r for r in map(json.loads, log.read_text().splitlines()) if "val_loss" in r]
    if not evals:
        return None
    best = min(evals, key=lambda r: r["val_loss"])
    return {"config": json.loads(cfg.read_text()), "best_val_loss": best["val_loss"], "best_iter": best["iter"],
            "final_val_loss": evals[-1]["val_loss"], "iters": evals[-1]["iter"], "finished": False,
            "stopped_reason": "interrupted (no summary.json)"}


def _mean_std(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)


def _model_accounting(table_name):
    """{(row, rope): (attn_params_mb, kv_mb)} from the meta-device models, for rows without
    runs. Optional: results for finished runs need none of it."""
    try:
        from scripts.attn_table import compute
        return {(r["row"], r["rope"]): (r["attn_params_mb"], r["kv_cache_mb"]) for r in compute(table_name)}
    except Exception as e:  # model.py/configurator missing or broken: leave the columns to the runs
        print(f"warning: could not count parameters from the model ({e}); using run summaries only", file=sys.stderr)
        return {}


def collect(table_name, runs_dir: Path, include_unfinished=False):
    """One dict per (row, RoPE setting) of the table, ours and the paper's numbers."""
    t = TABLES[table_name]
    runs = load_summaries(runs_dir, include_unfinished)
    known = {(r.id, rope) for r in t.rows for rope in r.rope_settings}
    for key in sorted(set(runs) - known):
        print(f"warning: runs for {key} match no row of {table_name}; ignored", file=sys.stderr)
    accounting = _model_accounting(table_name)

    out = []
    for row in t.rows:
        for rope in row.rope_settings:
            ss = sorted(runs.get((row.id, rope), []), key=lambda s: s["_seed"])
            paper = row.paper[rope]
            loss, loss_std = _mean_std([s.get("best_val_loss") for s in ss])
            best_iter, _ = _mean_std([s.get("best_iter") for s in ss])
            p_mb, kv_mb = accounting.get((row.id, rope), (None, None))
            if ss:  # the trained model's own accounting wins
                s = ss[0]
                n_layer = (s.get("config") or {}).get("n_layer") or (s.get("model_config") or {}).get("n_layer")
                if s.get("attn_params") is not None:
                    p_mb = s["attn_params"] * 2 / 1e6
                if s.get("kv_values_per_token_per_layer") is not None and n_layer:
                    kv_mb = s["kv_values_per_token_per_layer"] * n_layer * t.seq_len * 2 / t.kv_unit_bytes
            rec = {
                "table": table_name, "row": row.id, "label": row.label, "family": row.family, "rope": rope,
                "n_seeds": len(ss), "seeds": [s["_seed"] for s in ss], "runs": [s["_run"] for s in ss],
                "val_loss": loss, "val_loss_std": loss_std,
                "best_iter": best_iter, "best_iters": [s.get("best_iter") for s in ss],
                "attn_params_mb": p_mb, "kv_cache_mb": kv_mb, "kv_unit": t.kv_unit,
                "loss_x_attn_params": loss * p_mb if loss is not None and p_mb is not None else None,
                "loss_x_kv_cache": loss * kv_mb if loss is not None and kv_mb is not None else None,
                "paper": dict(paper),
            }
            rec["diff_val_loss"] = loss - paper["val_loss"] if loss is not None else None
            if table_name == "owt":
                zs = [s["_zeroshot"] for s in ss if s.get("_zeroshot")]
                rec["zeroshot"] = {c: _mean_std([z.get(c) for z in zs])[0] for c in ZERO_SHOT_COLUMNS}
                rec["n_zeroshot"] = len(zs)
            out.append(rec)

    # gap to MHA with the same RoPE setting: 100 * (loss / loss_MHA - 1), positive = worse than MHA
    mha = {r["rope"]: r for r in out if r["family"] == "MHA"}
    for r in out:
        m = mha.get(r["rope"])
        ok = m is not None and r["val_loss"] is not None and m["val_loss"] is not None
        r["gap_to_mha_pct"] = 100 * (r["val_loss"] / m["val_loss"] - 1) if ok else None
        r["paper_gap_to_mha_pct"] = 100 * (r["paper"]["val_loss"] / m["paper"]["val_loss"] - 1) if m else None
    return out


# -----------------------------------------------------------------------------
# table.md


def _f(x, dec, sign=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    return f"{x:+.{dec}f}" if sign else f"{x:.{dec}f}"


def _diff(ours, paper):
    return None if ours is None or paper is None else ours - paper


def markdown(table_name, recs, runs_dir) -> str:
    t = TABLES[table_name]
    u = t.kv_unit
    lines = [
        f"# {table_name}: ours vs the paper ({t.paper_label})",
        "",
        f"GPT-2 124M, N={t.seq_len}. Runs from `{runs_dir}`. Val loss = best validation loss of a run, "
        "mean ± sample std over seeds (n = number of seeds). Attn params in MB of bf16 (all layers); "
        f"KV cache for batch 1 and N={t.seq_len} in {u}. Δ = ours − paper. Gap to MHA = "
        "100·(loss / MHA's loss with the same RoPE setting − 1), positive = worse than MHA. "
        f"{DASH} = no finished run.",
        "",
    ]
    header = ("| Method | Attn params [MB] ours / paper | KV cache [" + u + "] ours / paper "
              "| Val loss ours | paper | Δ | Loss×params ours | paper | Δ | Loss×KV ours | paper | Δ "
              "| Gap to MHA ours | paper | best_iter | n |")
    sep = "|" + "---|" * (header.count("|") - 1)
    dk = t.decimals["kv_cache_mb"]
    for rope in ROPE_SETTINGS:
        part = [r for r in recs if r["rope"] == rope]
        if not part:
            continue
        lines += [f"## {'w/o RoPE' if rope == 'off' else 'w/ RoPE'}", "", header, sep]
        for r in part:
            p = r["paper"]
            loss = _f(r["val_loss"], 3)
            if r["val_loss_std"] is not None:
                loss += f" ± {r['val_loss_std']:.3f}"
            gap = _f(r["gap_to_mha_pct"], 2, sign=True)
            pgap = _f(r["paper_gap_to_mha_pct"], 2, sign=True)
            lines.append(
                f"| {r['label']} | {_f(r['attn_params_mb'], 2)} / {_f(p['attn_params_mb'], 2)} "
                f"| {_f(r['kv_cache_mb'], dk + 1)} / {_f(p['kv_cache_mb'], dk)} "
                f"| {loss} | {_f(p['val_loss'], 3)} | {_f(r['diff_val_loss'], 3, sign=True)} "
                f"| {_f(r['loss_x_attn_params'], 2)} | {_f(p.get('loss_x_attn_params'), 2)} "
                f"| {_f(_diff(r['loss_x_attn_params'], p.get('loss_x_attn_params')), 2, sign=True)} "
                f"| {_f(r['loss_x_kv_cache'], 2)} | {_f(p.get('loss_x_kv_cache'), 2)} "
                f"| {_f(_diff(r['loss_x_kv_cache'], p.get('loss_x_kv_cache')), 2, sign=True)} "
                f"| {gap + '%' if gap != DASH else gap} | {pgap + '%' if pgap != DASH else pgap} "
                f"| {_f(r['best_iter'], 0)} | {r['n_seeds']} |")
        lines.append("")
    if table_name == "owt":
        lines += _zeroshot_markdown(recs)
    return "\n".join(lines)


def _zeroshot_markdown(recs) -> list:
    lines = ["# Zero-shot: ours / paper", "",
             "From each run's zeroshot.json (`python -m scripts.eval_zeroshot --out_dir=<run>`), mean over "
             "seeds (n = runs evaluated). Perplexities, then accuracies in %.", ""]
    header = "| Method | " + " | ".join(ZERO_SHOT_HEADERS) + " | n |"
    for rope in ROPE_SETTINGS:
        part = [r for r in recs if r["rope"] == rope]
        if not part:
            continue
        lines += [f"## {'w/o RoPE' if rope == 'off' else 'w/ RoPE'}", "", header, "|" + "---|" * (header.count("|") - 1)]
        for r in part:
            cells = [f"{_f(r['zeroshot'][c], 2)} / {_f(r['paper'].get(c), 2)}" for c in ZERO_SHOT_COLUMNS]
            lines.append(f"| {r['label']} | " + " | ".join(cells) + f" | {r['n_zeroshot']} |")
        lines.append("")
    return lines


# -----------------------------------------------------------------------------
# Pareto plots


def pareto_front(points):
    """The (x, y) points no other point beats in both x and y (lower is better), by x."""
    front, best_y = [], math.inf
    for x, y in sorted(points):
        if y < best_y:
            front.append((x, y))
            best_y = y
    return front


def plot_pareto(table_name, recs, xkey, xlabel, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    ropes = [rope for rope in ROPE_SETTINGS if any(r["rope"] == rope for r in recs)]
    fig, axes = plt.subplots(1, len(ropes), figsize=(6.5 * len(ropes), 4.8), sharey=True, squeeze=False)
    for ax, rope in zip(axes[0], ropes):
        part = [r for r in recs if r["rope"] == rope]
        ours, paper = [], []
        for r in part:
            color, marker = FAMILY_STYLE[r["family"]]
            px, py = r["paper"].get(xkey), r["paper"].get("val_loss")
            if px and py is not None:
                ax.scatter(px, py, facecolors="none", edgecolors=color, marker=marker, s=55, linewidths=1.2)
                paper.append((px, py))
            x, y = r[xkey], r["val_loss"]
            if x and y is not None:
                ax.errorbar(x, y, yerr=r["val_loss_std"] or None, color=color, marker=marker, ms=7,
                            linestyle="none", capsize=2)
                ours.append((x, y))
        for pts, style, lab in ((ours, "-", "ours"), (paper, "--", "paper")):
            front = pareto_front(pts)
            if len(front) > 1:
                xs, ys = zip(*front)
                ax.step(xs, ys, where="post", color="grey", linestyle=style, linewidth=1, alpha=0.7)
        ax.set_xscale("log")
        # plain numbers on the log axis: 1, 2, 5, 10, 20, 50 (other minor ticks unlabelled)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
        ax.set_xlabel(xlabel)
        ax.set_title(f"{TABLES[table_name].paper_label}: {'w/o RoPE' if rope == 'off' else 'w/ RoPE'}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("val loss")
    fams = [f for f in FAMILY_STYLE if any(r["family"] == f for r in recs)]
    handles = [Line2D([], [], color=FAMILY_STYLE[f][0], marker=FAMILY_STYLE[f][1], linestyle="none", label=f)
               for f in fams]
    handles += [Line2D([], [], color="grey", marker="o", linestyle="-", label="ours (filled, front solid)"),
                Line2D([], [], color="grey", marker="o", markerfacecolor="none", linestyle="--",
                       label="paper (hollow, front dashed)")]
    # below the panels, so it never hides a point
    fig.legend(handles=handles, fontsize=8, loc="lower center", ncol=5, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", choices=sorted(TABLES))
    ap.add_argument("--runs", default=None, help="default: results/<table>/runs")
    ap.add_argument("--out", default=None, help="default: results/<table>")
    ap.add_argument("--include-unfinished", dest="include_unfinished", action="store_true")
    args = ap.parse_args(argv)
    runs_dir = Path(args.runs) if args.runs else REPO / "results" / args.table / "runs"
    out = Path(args.out) if args.out else REPO / "results" / args.table
    out.mkdir(parents=True, exist_ok=True)

    recs = collect(args.table, runs_dir, args.include_unfinished)
    (out / "table.md").write_text(markdown(args.table, recs, runs_dir))
    (out / "table.json").write_text(json.dumps(recs, indent=1))
    unit = TABLES[args.table].kv_unit
    plot_pareto(args.table, recs, "attn_params_mb", "attention params [MB, bf16]", out / "pareto_attn_params.png")
    plot_pareto(args.table, recs, "kv_cache_mb", f"KV cache [{unit}]", out / "pareto_kv_cache.png")
    n = sum(1 for r in recs if r["n_seeds"])
    print(f"{n}/{len(recs)} (row, RoPE) entries have runs; wrote {out}/table.md, table.json, "
          f"pareto_attn_params.png, pareto_kv_cache.png")


if __name__ == "__main__":
    main()

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

    python -m scripts.results enwiki     # results/enwiki/runs -> results/enwiki (issue 15)

enwiki (tab_gpt2's rows on English Wikipedia, beside the paper's OpenWebText numbers): the val
loss is each run's final_val_loss (the whole val split after the last iteration), and <out> gets
table.md / table.json (val loss, gap to MHA in %, attention MB, KV cache; rows without runs say
"not run"), pareto_attn_params.png / pareto_kv_cache.png (gap to MHA in %, ours vs the paper's,
since the two corpora's losses are not comparable), val_curves.png (validation and training loss
of MHA, GQA-2, MLA shared 128 and the two Tucker rows, [8,128,64] and [8,64,64], over the iterations, as the
paper's OpenWebText figure) and claims.md (the paper's claims checked against the seed spread).
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

from checkpoint import read_log, save_figure, write_text  # noqa: E402
from scripts.attn_table import BYTES_BF16  # noqa: E402  (the tables' MB; attn_table imports torch only when it counts)
from scripts.paper_tables import ENWIKI_SEED_ROWS, OWT_COLUMNS, ROPE_SETTINGS, TABLES  # noqa: E402

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
    "MLA full query, latent RoPE": ("tab:purple", "<"),
    "Tucker separated": ("tab:green", "D"),
    "Tucker shared": ("tab:olive", "P"),
}


# -----------------------------------------------------------------------------
# collecting


def load_summaries(runs_dir: Path, include_unfinished=False, quiet=False):
    """{(row_id, rope): [summary, ...]} of the runs found under runs_dir. The unfinished runs left out (without
    include_unfinished) are named on stderr, not dropped silently."""
    found, left_out = {}, []
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
                if not include_unfinished:
                    left_out.append(d.name)
                continue
        else:
            try:
                s = json.loads(f.read_text())
            except ValueError:
                print(f"warning: unreadable {f}", file=sys.stderr)
                continue
        if not (s.get("finished") or include_unfinished):
            left_out.append(d.name)
            continue
        s["_run"] = d.name
        z = d / "zeroshot.json"  # scripts/eval_zeroshot.py, run after training (owt)
        if z.is_file():
            try:
                zeroshot = json.loads(z.read_text())
            except ValueError:
                zeroshot = None
                print(f"warning: unreadable {z}", file=sys.stderr)
            if zeroshot is not None and zeroshot.get("limit") is not None:  # a quick check's: not the table's
                print(f"warning: {z} is a quick check (limit {zeroshot['limit']}); not in the table", file=sys.stderr)
            elif zeroshot is not None:
                s["_zeroshot"] = zeroshot.get("row") or {}
        s["_seed"] = int(m["seed"])
        found.setdefault((m["row"], m["rope"]), []).append(s)
    if left_out and not quiet:
        print(f"note: {len(left_out)} unfinished run(s) not in the table (--include-unfinished counts them): "
              f"{', '.join(left_out)}", file=sys.stderr)
    return found


# the keys a run's config may differ in without being another experiment: where and how it ran (sweep's
# NOT_SETTINGS), and the run's own name and seed
NOT_COMPARED = {"seed", "out_dir", "wandb_run_name"}


def designed_keys(table_name):
    """(configs, keys): every run's resolved config of the table ([row_settings(row, rope), ...]: the model keys
    filled in, as train.py writes them) and the keys its rows vary by design (attn, ranks, pos_emb, ...: those that
    differ between them)."""
    from scripts.paper_tables import all_runs
    designed = [row_settings(row, rope) for row, rope in all_runs(table_name)]
    return designed, {k for k in designed[0] if len({json.dumps(c.get(k), sort_keys=True) for c in designed}) > 1}


def row_settings(row, rope: str) -> dict:
    """The run config of a row and RoPE setting in JSON's types, its model keys as GPTConfig fills them."""
    from scripts.compare_runs import filled_model_keys
    from scripts.paper_tables import run_config
    want = run_config(row, rope)
    return {**json.loads(json.dumps(want)), **filled_model_keys(want)}


def not_its_row(summary: dict, want: dict, keys) -> list:
    """['key=run's value (row: value)'] for each of `keys` (the table's by-design keys) in which a run's config
    differs from `want`, the row_settings of the row and RoPE setting its folder names (the model keys filled in on
    both sides): e.g. a sweep's `--rope off -- --pos_emb=rope` trains RoPE runs into folders named rope_off."""
    from scripts.compare_runs import filled_model_keys
    have = {**json.loads(json.dumps(summary.get("config") or {})), **(summary.get("model_config") or {})}
    have = {**have, **filled_model_keys(have)}  # None where GPTConfig fills a default, in either file
    return [f"{k}={json.dumps(have[k])} (row: {json.dumps(want[k])})" for k in sorted(keys)
            if k in have and k in want and have[k] != want[k]]


def mixed_settings(table_name, runs_dir: Path, include_unfinished=False) -> dict:
    """(mixed, overrides): mixed {key: {value: [run, ...]}} for each training setting the table's runs disagree on,
    beyond the keys its rows vary by design (those that differ between the rows' own resolved configs: attn, ranks, pos_emb, ...) and
    NOT_COMPARED / sweep.NOT_SETTINGS: a mean over seeds, a gap to MHA or a Pareto plot across such runs compares
    different experiments (e.g. a smoke run's 4 iterations beside 10,000), {} when they agree; overrides {key:
    value} for the settings all the runs share that differ from the rows' config files."""
    from scripts.compare_runs import with_model_keys_filled
    from scripts.sweep import NOT_SETTINGS
    designed, by_design = designed_keys(table_name)
    skip = by_design | NOT_COMPARED | NOT_SETTINGS
    values = {}  # key -> {value as JSON: [run, ...]}
    for ss in load_summaries(runs_dir, include_unfinished, quiet=True).values():
        for s in ss:
            # the model keys filled in (train.py writes them so since session 40; earlier runs hold tucker_ranks_post
            # None for tucker_ranks): one setting, however a run wrote it
            for k, v in with_model_keys_filled(s.get("config") or {}).items():
                if k not in skip:
                    values.setdefault(k, {}).setdefault(json.dumps(v, sort_keys=True), []).append(s["_run"])
    mixed = {k: v for k, v in sorted(values.items()) if len(v) > 1}
    # settings every run shares but the rows' config files do not give (the command's overrides, e.g. a smoke
    # sweep's --max_iters=4, or the committed tables' --eval_interval=50 --patience=6)
    overrides = {k: json.loads(next(iter(v))) for k, v in sorted(values.items())
                 if len(v) == 1 and k in designed[0] and json.loads(next(iter(v))) != json.loads(
                     json.dumps(designed[0][k]))}
    return mixed, overrides


def describe_mixed(mixed: dict, limit=3) -> list:
    """One line a key of mixed_settings: its values, each with its number of runs and (a few of) their names."""
    lines = []
    for k, by_value in mixed.items():
        parts = [f"{v}: {len(runs)} run(s) ({', '.join(runs[:limit])}{', ...' if len(runs) > limit else ''})"
                 for v, runs in sorted(by_value.items(), key=lambda kv: -len(kv[1]))]
        lines.append(f"{k} = " + "; ".join(parts))
    return lines


def _summary_from_log(d: Path):
    """A partial summary of an interrupted run from its log.jsonl and config.json (None if absent)."""
    log, cfg = d / "log.jsonl", d / "config.json"
    if not (log.is_file() and cfg.is_file()):
        return None
    evals = [r for r in read_log(d) if "val_loss" in r]  # an interrupted run's last line may be cut
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
    from scripts.sweep import NOT_SETTINGS
    _, by_design = designed_keys(table_name)
    by_design -= NOT_COMPARED | NOT_SETTINGS  # out_dir, wandb_run_name: each row's file names its own

    out = []
    for row in t.rows:
        for rope in row.rope_settings:
            ss = sorted(runs.get((row.id, rope), []), key=lambda s: s["_seed"])
            want = row_settings(row, rope) if ss else {}
            for s in list(ss):
                wrong = not_its_row(s, want, by_design)
                if wrong:  # another row's run under this name
                    print(f"warning: {s['_run']} was not trained as its folder's row says: {', '.join(wrong)}; "
                          f"left out of {row.id} / {rope}", file=sys.stderr)
                    ss.remove(s)
            # a run without the table's loss (stopped before its first evaluation, or diverged: null) is no seed of
            # the mean: n, seeds, best_iter and the seed spread count only the runs that have one
            lossless = [s["_run"] for s in ss if s.get(t.reported_loss) is None]
            if lossless:
                print(f"warning: {', '.join(lossless)}: no {t.reported_loss}; not counted in {row.id} / {rope}",
                      file=sys.stderr)
            ss = [s for s in ss if s.get(t.reported_loss) is not None]
            # a cell the paper did not report (NaN in paper_tables) is None here, as in table.json
            paper = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.paper[rope].items()}
            scale = BYTES_BF16 / t.paper_bytes_per_value  # llama1b prints millions of params / values: MB of bf16
            for k in ("attn_params_mb", "kv_cache_mb", "loss_x_attn_params", "loss_x_kv_cache"):
                if paper.get(k) is not None:
                    paper[k] *= scale
            loss, loss_std = _mean_std([s.get(t.reported_loss) for s in ss])  # best_val_loss, or final
            best_iter, _ = _mean_std([s["best_iter"] for s in ss if s.get("best_iter") is not None and s["best_iter"] >= 0])
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
                "runs_without_loss": lossless,
                "val_loss": loss, "val_loss_std": loss_std,
                "best_iter": best_iter, "best_iters": [s.get("best_iter") for s in ss],
                "attn_params_mb": p_mb, "kv_cache_mb": kv_mb, "kv_unit": t.kv_unit,
                "loss_x_attn_params": loss * p_mb if loss is not None and p_mb is not None else None,
                "loss_x_kv_cache": loss * kv_mb if loss is not None and kv_mb is not None else None,
                "paper": dict(paper), "reported_loss": t.reported_loss,
                "wall_time_s": [s.get("wall_time_s") for s in ss], "tokens": [s.get("tokens") for s in ss],
                "devices": sorted({s["device_name"] for s in ss if s.get("device_name")}),
                "git_commits": sorted({s["git_commit"] for s in ss if s.get("git_commit")}),
            }
            ok = loss is not None and paper["val_loss"] is not None
            rec["diff_val_loss"] = loss - paper["val_loss"] if ok else None
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
        ok = m is not None and r["paper"]["val_loss"] is not None and m["paper"]["val_loss"] is not None
        r["paper_gap_to_mha_pct"] = 100 * (r["paper"]["val_loss"] / m["paper"]["val_loss"] - 1) if ok else None
        # the seed spread of the gap (MHA's own spread not included)
        ok = m is not None and r["val_loss_std"] is not None and m["val_loss"] is not None
        r["gap_to_mha_pct_std"] = 100 * r["val_loss_std"] / m["val_loss"] if ok else None
    return out


# -----------------------------------------------------------------------------
# table.md


def _f(x, dec, sign=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    return f"{x:+.{dec}f}" if sign else f"{x:.{dec}f}"


def _diff(ours, paper):
    return None if ours is None or paper is None else ours - paper


def markdown(table_name, recs, runs_dir, mixed=None, overrides=None) -> str:
    t = TABLES[table_name]
    u = t.kv_unit
    lines = [
        f"# {table_name}: ours vs the paper ({t.paper_label})",
        "",
        f"{t.model}, N={t.seq_len}. Runs from `{shown_path(runs_dir)}`. Val loss = best validation loss of a run, "
        "mean ± sample std over seeds (n = number of seeds). Attn params in MB of bf16 (all layers); "
        f"KV cache for batch 1 and N={t.seq_len} in {u}. Δ = ours − paper. Gap to MHA = "
        "100·(loss / MHA's loss with the same RoPE setting − 1), positive = worse than MHA. "
        f"{DASH} = no finished run.",
        "",
    ]
    if overrides:
        lines += ["Trained with, beside the rows' config files (every run): "
                  + ", ".join(f"`{k}={v!r}`" for k, v in overrides.items()) + ".", ""]
    if mixed:
        lines += ["**The runs were not all trained with the same settings** (beyond what the rows vary by design); "
                  "means, gaps and plots across them may compare different experiments (check each key):", ""]
        lines += [f"- {line}" for line in describe_mixed(mixed)] + [""]
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


def plot_pareto(table_name, recs, xkey, xlabel, path, ykey="val_loss", paper_ykey="val_loss", ylabel="val loss",
                yerr_key="val_loss_std"):
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
            px, py = r["paper"].get(xkey), r["paper"].get(paper_ykey, r.get(paper_ykey))
            if px and py is not None:
                ax.scatter(px, py, facecolors="none", edgecolors=color, marker=marker, s=55, linewidths=1.2)
                paper.append((px, py))
            x, y = r[xkey], r[ykey]
            if x and y is not None:
                ax.errorbar(x, y, yerr=r.get(yerr_key) or None, color=color, marker=marker, ms=7,
                            linestyle="none", capsize=2)
                ours.append((x, y))
        for pts, style in ((ours, "-"), (paper, "--")):  # our Pareto front solid, the paper's dashed
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
    axes[0][0].set_ylabel(ylabel)
    fams = [f for f in FAMILY_STYLE if any(r["family"] == f for r in recs)]
    handles = [Line2D([], [], color=FAMILY_STYLE[f][0], marker=FAMILY_STYLE[f][1], linestyle="none", label=f)
               for f in fams]
    handles += [Line2D([], [], color="grey", marker="o", linestyle="-", label="ours (filled, front solid)"),
                Line2D([], [], color="grey", marker="o", markerfacecolor="none", linestyle="--",
                       label="paper (hollow, front dashed)")]
    # below the panels, so it never hides a point
    fig.legend(handles=handles, fontsize=8, loc="lower center", ncol=5, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    save_figure(fig, path, dpi=120)


# -----------------------------------------------------------------------------
# enwiki (issue 15): tab_gpt2's rows on English Wikipedia


def _rope_name(rope):
    return "w/o RoPE" if rope == "off" else "w/ RoPE"


def load_logs(runs_dir: Path):
    """{(row, rope): {seed: (evals, train)}} from every run's log.jsonl: evals = [(iter, val, train)],
    train = [(iter, loss)] (the logged training loss), unfinished runs included."""
    out = {}
    if not runs_dir.is_dir():
        return out
    for d in sorted(runs_dir.iterdir()):
        m = RUN_DIR_RE.match(d.name)
        if not m or not (d / "log.jsonl").is_file():
            continue
        evals, train = {}, {}
        for r in read_log(d):  # a line cut by a kill is left out
            if "val_loss" in r:
                evals[r["iter"]] = (r["iter"], r["val_loss"], r.get("train_loss"))
            elif "loss" in r:
                train[r["iter"]] = (r["iter"], r["loss"])
        out.setdefault((m["row"], m["rope"]), {})[int(m["seed"])] = (sorted(evals.values()), sorted(train.values()))
    return out


def seed_noise(recs):
    """Pooled sample std of the reported val loss over the (row, RoPE) entries run with >= 2 seeds
    (None when there are none yet), and how many entries it pools."""
    pairs = [(r["val_loss_std"], r["n_seeds"]) for r in recs if r["n_seeds"] >= 2 and r["val_loss_std"] is not None]
    if not pairs:
        return None, 0
    return math.sqrt(sum((n - 1) * sd ** 2 for sd, n in pairs) / sum(n - 1 for _, n in pairs)), len(pairs)


def compare(a, b, sigma):
    """(b - a, its noise band): twice the std of a difference of a mean over a's seeds and one over
    b's, with the pooled per-run std sigma. None where either has no run; band None without sigma."""
    if a is None or b is None or a["val_loss"] is None or b["val_loss"] is None:
        return None, None
    band = 2 * sigma * math.sqrt(1 / a["n_seeds"] + 1 / b["n_seeds"]) if sigma else None
    return b["val_loss"] - a["val_loss"], band


def verdict(d, band, expect_positive=True):
    """'holds' / 'within noise' / 'does not hold' for a difference expected to be > 0 (or < 0)."""
    if d is None:
        return "not run"
    if band is None:
        return "unjudged (no seed spread yet)"
    if abs(d) <= band:
        return "within noise"
    return "holds" if (d > 0) == expect_positive else "does not hold (opposite sign, beyond noise)"


def _d(d, band):
    if d is None:
        return "not run"
    return f"{d:+.3f}" + (f" (noise band ±{band:.3f})" if band is not None else "")


def shown_path(p) -> str:
    """A path as the tables print it: relative to the repository when inside it (no machine-specific prefix)."""
    try:
        return str(Path(p).resolve().relative_to(REPO))
    except ValueError:
        return str(p)


def enwiki_markdown(recs, runs_dir, sigma, n_pooled) -> str:
    runs_dir = shown_path(runs_dir)
    runs = [r for r in recs if r["n_seeds"]]
    walls = [w for r in runs for w in r["wall_time_s"] if w]
    devices = sorted({d for r in runs for d in r["devices"]})
    commits = sorted({c for r in runs for c in r["git_commits"]})
    lines = [
        "# enwiki: tab_gpt2's rows on English Wikipedia, beside the paper's OpenWebText numbers", "",
        "GPT-2 124M (no biases), N=1024, 32 sequences per step, 1,300 iterations (42.6M tokens, about one pass "
        "over the 42.25M train tokens), AdamW lr 6e-4 → 6e-5 cosine, 100 warmup iterations, weight decay 0.1, "
        "betas (0.9, 0.95), clip 1.0, bf16, torch.compile (`config/enwiki_base.py`). "
        "**Val loss = the final val loss on the whole val split (1.08M tokens)**, mean ± sample std over seeds "
        "(n). Gap to MHA = 100·(loss / MHA's loss with the same RoPE setting − 1), positive = worse than MHA. "
        "Attention params in MB of bf16 (all layers); KV cache for batch 1 at N=1024 in MB. The paper's "
        "columns are its OpenWebText numbers (600k iterations of 480 sequences: a different corpus and "
        "~7,000 times the tokens), so compare gaps, not losses. — = the paper reports no such cell.", "",
        (f"Runs from `{runs_dir}`: {len(runs)}/{len(recs)} (row, RoPE) entries, "
         f"{sum(r['n_seeds'] for r in runs)} runs; devices: {', '.join(devices) or DASH}; "
         + (f"wall time per run {min(walls):.0f}–{max(walls):.0f} s; " if walls else "")) if runs else
        f"Runs from `{runs_dir}`: none yet; ",
    ]
    lines[-1] += (f"seed spread (pooled sample std over {n_pooled} entries with several seeds): {sigma:.4f}."
                  if sigma else "no seed spread yet (rows with seeds 1 and 2 not run).")
    if commits:
        lines += ["", f"Git commit(s): {', '.join(commits)}."]
    lines.append("")
    header = ("| Method | Attn params [MB] ours / paper | KV cache [MB] ours / paper | Val loss (final, whole split) "
              "| n | Gap to MHA ours | Gap to MHA paper | Paper val loss (OWT) |")
    for rope in ROPE_SETTINGS:
        part = [r for r in recs if r["rope"] == rope]
        lines += [f"## {_rope_name(rope)}", "", header, "|" + "---|" * (header.count("|") - 1)]
        for r in part:
            p = r["paper"]
            if r["val_loss"] is None:
                loss = "not run"
            else:
                loss = f"{r['val_loss']:.4f}" + (f" ± {r['val_loss_std']:.4f}" if r["val_loss_std"] is not None else "")
            gap = _f(r["gap_to_mha_pct"], 2, sign=True)
            if gap != DASH:
                gap += "%" + (f" ± {r['gap_to_mha_pct_std']:.2f}" if r["gap_to_mha_pct_std"] is not None else "")
            pgap = _f(r["paper_gap_to_mha_pct"], 2, sign=True)
            lines.append(
                f"| {r['label']} | {_f(r['attn_params_mb'], 2)} / {_f(p['attn_params_mb'], 2)} "
                f"| {_f(r['kv_cache_mb'], 3)} / {_f(p['kv_cache_mb'], 2)} | {loss} | {r['n_seeds']} "
                f"| {gap} | {pgap + '%' if pgap != DASH else pgap} | {_f(p['val_loss'], 3)} |")
        lines.append("")
    missing = [f"{r['row']}/{r['rope']}" for r in recs if not r["n_seeds"]]
    lines.append("Not run: " + (", ".join(missing) if missing else "none") + ".")
    seeds_missing = [f"{rid}/{rope}" for rid in ENWIKI_SEED_ROWS for rope in ROPE_SETTINGS
                     if next((r for r in recs if r["row"] == rid and r["rope"] == rope), {"n_seeds": 0})["n_seeds"] < 3]
    if seeds_missing:
        lines.append(f"Seed runs (1337, 1, 2) incomplete for: {', '.join(seeds_missing)}.")
    return "\n".join(lines) + "\n"


CURVE_ROWS = (("mha", "-"), ("gqa2", "-"), ("mla_shared128", "-"), ("tucker_8_128_64", "-"), ("tucker_8_64_64", "--"))


def plot_curves(recs, logs, path):
    """Validation (top) and training (bottom) loss over the iterations of MHA, GQA-2, MLA shared 128
    and Tucker [8,128,64] (the paper's OpenWebText figure) plus Tucker [8,64,64]; mean over seeds."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    label = {r["row"]: r for r in recs}
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True, squeeze=False)
    for col, rope in enumerate(ROPE_SETTINGS):
        for row_id, style in CURVE_ROWS:
            seeds = logs.get((row_id, rope))
            if not seeds or row_id not in label:
                continue
            color = FAMILY_STYLE[label[row_id]["family"]][0]
            for kind, ax in (("val", axes[0][col]), ("train", axes[1][col])):
                series = {}
                for evals, train in seeds.values():
                    pts = [(i, v) for i, v, _ in evals] if kind == "val" else train
                    for i, v in pts:
                        series.setdefault(i, []).append(v)
                xs = sorted(i for i in series if i > 0)  # iteration 0 (ln 50257) would flatten the plot
                if not xs:
                    continue
                ys = [statistics.fmean(series[i]) for i in xs]
                if kind == "train" and len(ys) > 5:  # the logged loss is one batch: a light running mean
                    ys = [statistics.fmean(ys[max(0, k - 4):k + 1]) for k in range(len(ys))]
                ax.plot(xs, ys, style, color=color, marker="o" if kind == "val" else None, ms=3, lw=1.3,
                        label=f"{label[row_id]['label']} (n={len(seeds)})")
        axes[0][col].set_title(f"val loss (whole split), {_rope_name(rope)}")
        axes[1][col].set_title(f"training loss (running mean of 5 logged batches), {_rope_name(rope)}")
        axes[1][col].set_xlabel("iteration")
    for ax in axes.flat:
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ys = [y for ln in ax.lines for x, y in zip(*ln.get_data()) if x >= 250]
            if ys:
                ax.set_ylim(min(ys) - 0.05, max(ys) + 0.1)
            ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def enwiki_claims(recs, logs, sigma, n_pooled) -> str:
    """The paper's OpenWebText claims, checked on enwiki against the seed spread."""
    by = {(r["row"], r["rope"]): r for r in recs}

    def rec(row, rope):
        r = by.get((row, rope))
        return r if r is not None and r["val_loss"] is not None else None

    def loss(row, rope):
        r = rec(row, rope)
        return f"{r['val_loss']:.3f}" if r else "not run"

    def ploss(row, rope):
        r = by.get((row, rope))
        v = r["paper"]["val_loss"] if r else None
        return f"{v:.3f}" if v is not None else "—"

    def pdiff(a, b, rope_a, rope_b=None):
        ra, rb = by.get((a, rope_a)), by.get((b, rope_b or rope_a))
        if not ra or not rb or ra["paper"]["val_loss"] is None or rb["paper"]["val_loss"] is None:
            return "—"
        return f"{rb['paper']['val_loss'] - ra['paper']['val_loss']:+.3f}"

    L = ["# The paper's OpenWebText claims, checked on enwiki", "",
         "From `table.json` (final whole-split val loss per run, mean over seeds). "
         + (f"Seed spread: pooled sample std {sigma:.4f} per run over {n_pooled} (row, RoPE) entries run with "
            "several seeds. A difference counts as real when it exceeds its noise band, twice the std of a "
            "difference of two seed means (2σ·sqrt(1/n_a + 1/n_b)); otherwise 'within noise'."
            if sigma else "No seed spread yet (seeds 1 and 2 not run): differences are listed unjudged.")
         + " The paper's numbers are OpenWebText's: only signs and gaps are comparable.", ""]

    # 1. Tucker's gap to MHA with a tenth of the attention parameters
    L.append("## 1. Tucker's gap to MHA, with 11-28% of MHA's attention parameters")
    L.append("Paper (tab_gpt2, w/o RoPE): Tucker [8,128,64] 'requires about 18% of the parameters of MHA ... "
             "to obtain competitive validation results'; [8,64,64] has 11%.")
    for rope in ROPE_SETTINGS:
        m = rec("mha", rope)
        for t in ("tucker_8_128_128", "tucker_8_128_64", "tucker_8_64_64"):
            r, full = rec(t, rope), by.get((t, rope))
            d, band = compare(m, r, sigma)
            if d is None:
                L.append(f"- {_rope_name(rope)}, {full['label']}: not run")
                continue
            share = 100 * r["attn_params_mb"] / m["attn_params_mb"]
            gap, pgap = r["gap_to_mha_pct"], r["paper_gap_to_mha_pct"]
            gband = 100 * band / m["val_loss"] if band is not None else None
            vs = ("" if pgap is None or gband is None else
                  f"; ours vs the paper's gap: {'agrees within noise' if abs(gap - pgap) <= gband else ('smaller' if gap < pgap else 'larger')}")
            L.append(f"- {_rope_name(rope)}, {r['label']} ({share:.1f}% of MHA's attention params): loss "
                     f"{r['val_loss']:.3f} vs MHA {m['val_loss']:.3f}, gap {gap:+.2f}%"
                     + (f" ± {gband:.2f}%" if gband is not None else "")
                     + (f" (paper {pgap:+.2f}%)" if pgap is not None else "")
                     + f"; worse than MHA: {verdict(d, band)}{vs}")

    # 2. Tucker vs MLA at equal KV cache
    L += ["", "## 2. Tucker vs MLA (and GQA-2) at equal KV cache (other − Tucker > 0: Tucker better)",
          "Paper: 'Tucker converges at the same rate as the canonical methods, reaching a lower loss than MLA' "
          "(its OpenWebText figure, Tucker [8,128,64] vs MLA shared 128, same KV cache, w/o RoPE)."]
    pairs = [("tucker_8_128_64", "mla_shared128", "off"), ("tucker_8_128_64", "mla_shared128", "on"),
             ("tucker_8_128_64", "mla_shared_latent128", "on"),
             ("tucker_8_128_128", "mla_gqa2_equiv", "off"), ("tucker_8_128_128", "mla_gqa2_equiv", "on"),
             ("tucker_8_128_128", "mla_gqa2_equiv_latent", "on"), ("tucker_8_128_128", "gqa2", "off"),
             ("tucker_8_128_128", "gqa2", "on")]
    for tk, ml, rope in pairs:
        a, b = rec(tk, rope), rec(ml, rope)
        d, band = compare(a, b, sigma)
        kv = (f"KV {a['kv_cache_mb']:.3f} vs {b['kv_cache_mb']:.3f} MB, attn {a['attn_params_mb']:.2f} vs "
              f"{b['attn_params_mb']:.2f} MB; " if a and b else "")
        L.append(f"- {_rope_name(rope)}: {by[(tk, rope)]['label']} {loss(tk, rope)} vs {by[(ml, rope)]['label']} "
                 f"{loss(ml, rope)} ({kv}paper {ploss(tk, rope)} vs {ploss(ml, rope)}): other − Tucker {_d(d, band)}: "
                 f"{verdict(d, band)}")

    # 3. The order of Tucker ranks
    L += ["", "## 3. Tucker ranks: [8,128,128] ≤ [8,128,64] ≤ [8,64,64] in val loss",
          "Paper: w/o RoPE 2.868 < 2.917 < 2.950; w/ RoPE 2.881 < 2.908 < 2.950."]
    order = ("tucker_8_128_128", "tucker_8_128_64", "tucker_8_64_64")
    for rope in ROPE_SETTINGS:
        steps = []
        for a, b in zip(order, order[1:]):
            d, band = compare(rec(a, rope), rec(b, rope), sigma)
            steps.append(f"{by[(a, rope)]['label']} → {by[(b, rope)]['label']} {_d(d, band)} (paper "
                         f"{pdiff(a, b, rope)}): {verdict(d, band)}")
        L.append(f"- {_rope_name(rope)}: " + ", ".join(f"{by[(t, rope)]['label']} {loss(t, rope)}" for t in order))
        L += [f"  - {s}" for s in steps]

    # 4. Shared vs separated KV
    L += ["", "## 4. Shared vs separated KV",
          "The paper's claim (tab_shake: shared KV costs a little, for Tucker and for MLA) has no clean pair in "
          "this table: every Tucker row is separated, and the two MLA rows differ in the query rank as well. "
          "Closest pair: MLA separated, full query, dcK=128 vs MLA shared, dcQ=dcK=128 (shared − separated):"]
    for rope, sep, sh in (("off", "mla_gqa2_equiv", "mla_shared128"), ("on", "mla_gqa2_equiv", "mla_shared128"),
                          ("on", "mla_gqa2_equiv_latent", "mla_shared_latent128")):
        d, band = compare(rec(sep, rope), rec(sh, rope), sigma)
        L.append(f"- {_rope_name(rope)}: {by[(sh, rope)]['label']} {loss(sh, rope)} vs {by[(sep, rope)]['label']} "
                 f"{loss(sep, rope)} (paper {pdiff(sep, sh, rope)}): {_d(d, band)}: shared worse: "
                 f"{verdict(d, band)} (confounded by the query rank: 128 vs 768)")

    # 5. RoPE
    L += ["", "## 5. RoPE vs learned positions (on − off < 0: RoPE better)",
          "Paper: 'slightly improved compared to the models without RoPE, mirroring the modest gain of MLA, GQA, "
          "and MHA' (tab_gpt2: MHA −0.030, GQA-4 −0.045, GQA-2 +0.003, MLA shared −0.052, Tucker +0.013, −0.009, "
          "0.000). MLA w/ RoPE: decoupled; Tucker: latent RoPE."]
    deltas = []
    for r in [x for x in recs if x["rope"] == "off"]:
        d, band = compare(rec(r["row"], "off"), rec(r["row"], "on"), sigma)
        if d is not None:
            deltas.append(d)
        L.append(f"- {r['label']}: {loss(r['row'], 'off')} → {loss(r['row'], 'on')}: {_d(d, band)} (paper "
                 f"{pdiff(r['row'], r['row'], 'off', 'on')}): RoPE better: {verdict(d, band, expect_positive=False)}")
    if deltas:
        L.append(f"- mean over {len(deltas)} rows {statistics.fmean(deltas):+.3f}, {sum(d < 0 for d in deltas)}/"
                 f"{len(deltas)} improve with RoPE")
    L.append("- latent vs decoupled RoPE for MLA (latent − decoupled):")
    for lat, dec in (("mla_shared_latent128", "mla_shared128"), ("mla_gqa2_equiv_latent", "mla_gqa2_equiv")):
        d, band = compare(rec(dec, "on"), rec(lat, "on"), sigma)
        v = ("" if d is None else " (unjudged)" if band is None else " (within noise)" if abs(d) <= band else
             f" (latent {'worse' if d > 0 else 'better'} beyond noise)")
        L.append(f"  - {by[(lat, 'on')]['label']} {loss(lat, 'on')} vs decoupled {loss(dec, 'on')}: {_d(d, band)}{v}"
                 f" (paper, tab_shake, MLA shared: latent +0.06 to +0.09 worse)")

    # 6. MLA [GQA-2 equiv.] expresses GQA-2
    L += ["", "## 6. MLA [GQA, nG=2 equiv.] vs GQA-2 (the expressivity claim: comparable)",
          "Paper (w/o RoPE): 2.882 vs 2.869, 'comparable'."]
    for rope in ROPE_SETTINGS:
        d, band = compare(rec("gqa2", rope), rec("mla_gqa2_equiv", rope), sigma)
        v = ("not run" if d is None else "unjudged (no seed spread yet)" if band is None else
             "holds (equal within noise)" if abs(d) <= band else f"does not hold ({'MLA' if d > 0 else 'GQA-2'} worse beyond noise)")
        L.append(f"- {_rope_name(rope)}: MLA {loss('mla_gqa2_equiv', rope)} vs GQA-2 {loss('gqa2', rope)}: MLA − GQA-2 "
                 f"{_d(d, band)}: {v}")

    # 7. Stability
    L += ["", "## 7. Training stability",
          "Paper: 'MLA with shared KV exhibits small instabilities, and even diverges for dcK=dcQ≤128'. Largest rise "
          "of the logged training loss between consecutive log points after warmup (iteration > 100), and the "
          "final val loss being finite:"]
    for r in recs:
        seeds = logs.get((r["row"], r["rope"]))
        if not seeds:
            continue
        rises = []
        for evals, train in seeds.values():
            vals = [v for i, v in train if i > 100]
            rises.append(max([0.0] + [b - a for a, b in zip(vals, vals[1:])]))
        fin = r["val_loss"] is not None and math.isfinite(r["val_loss"])
        L.append(f"- {r['label']} {_rope_name(r['rope'])}: largest rise {max(rises):+.3f}"
                 f"{'' if fin else ', NOT FINITE / no final loss'}")
    return "\n".join(L) + "\n"


def enwiki_report(recs, runs_dir, out):
    """table.md, table.json, Pareto plots of the gap to MHA, val_curves.png and claims.md for enwiki."""
    sigma, n_pooled = seed_noise(recs)
    logs = load_logs(runs_dir)
    write_text(out / "table.md", enwiki_markdown(recs, runs_dir, sigma, n_pooled))
    write_text(out / "table.json", json.dumps(recs, indent=1))
    for xkey, xlabel, name in (("attn_params_mb", "attention params [MB, bf16]", "pareto_attn_params.png"),
                               ("kv_cache_mb", "KV cache [MB], N=1024", "pareto_kv_cache.png")):
        plot_pareto("enwiki", recs, xkey, xlabel, out / name, ykey="gap_to_mha_pct",
                    paper_ykey="paper_gap_to_mha_pct", ylabel="gap to MHA [%] (ours: enwiki, paper: OpenWebText)",
                    yerr_key="gap_to_mha_pct_std")
    plot_curves(recs, logs, out / "val_curves.png")
    write_text(out / "claims.md", enwiki_claims(recs, logs, sigma, n_pooled))
    n = sum(1 for r in recs if r["n_seeds"])
    print(f"{n}/{len(recs)} (row, RoPE) entries have runs; wrote {out}/table.md, table.json, claims.md, "
          f"pareto_attn_params.png, pareto_kv_cache.png, val_curves.png")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", choices=sorted(TABLES))
    ap.add_argument("--runs", default=None, help="default: results/<table>/runs")
    ap.add_argument("--out", default=None, help="default: results/<table> for the committed runs, else the --runs "
                    "folder (a table of your runs never replaces the committed one)")
    ap.add_argument("--include-unfinished", dest="include_unfinished", action="store_true")
    args = ap.parse_args(argv)
    committed = REPO / "results" / args.table / "runs"
    runs_dir = Path(args.runs) if args.runs else committed
    # other runs' table goes beside them, never over the committed one in results/<table> (a --runs without --out did)
    out = Path(args.out) if args.out else (REPO / "results" / args.table if runs_dir.resolve() == committed.resolve()
                                           else runs_dir)
    if not runs_dir.is_dir():
        raise SystemExit(f"error: --runs {runs_dir} is not a folder (the sweep's --results_dir)")
    recs = collect(args.table, runs_dir, args.include_unfinished)
    if not any(r["n_seeds"] for r in recs):  # a table of dashes would replace the one in --out
        raise SystemExit(f"error: no finished run of table {args.table!r} in {runs_dir} (--include-unfinished "
                         "counts runs stopped early): nothing written")
    if out.exists() and not out.is_dir():
        raise SystemExit(f"error: --out {out} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    mixed, overrides = mixed_settings(args.table, runs_dir, args.include_unfinished)
    if mixed:
        print("warning: the runs were not all trained with the same settings (beyond what the rows vary by "
              "design):\n  " + "\n  ".join(describe_mixed(mixed)), file=sys.stderr)
    if args.table == "enwiki":
        return enwiki_report(recs, runs_dir, out)
    write_text(out / "table.md", markdown(args.table, recs, runs_dir, mixed, overrides))
    write_text(out / "table.json", json.dumps(recs, indent=1))
    unit = TABLES[args.table].kv_unit
    plot_pareto(args.table, recs, "attn_params_mb", "attention params [MB, bf16]", out / "pareto_attn_params.png")
    plot_pareto(args.table, recs, "kv_cache_mb", f"KV cache [{unit}]", out / "pareto_kv_cache.png")
    n = sum(1 for r in recs if r["n_seeds"])
    print(f"{n}/{len(recs)} (row, RoPE) entries have runs; wrote {out}/table.md, table.json, "
          f"pareto_attn_params.png, pareto_kv_cache.png")


if __name__ == "__main__":
    main()

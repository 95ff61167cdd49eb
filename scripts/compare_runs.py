r"""
Do train.py runs that differ only in how they compute follow the same loss curve? (issue 14: the
fast training path, torch.compile with CUDA graphs and the chunked loss head, against the plain one.)

    python -m scripts.compare_runs out-curve/tucker-plain out-curve/tucker-compiled out-curve/tucker-fast \
        --out results/bench/fastpath_curve --name tucker

Reads each run folder's log.jsonl (train.py's per-iteration "loss" records and its evaluations) and
compares every run with the first: the largest and the mean absolute difference of the training
loss over the iterations both logged, the same relative to the loss, and the final val losses.
Writes <name>.json, <name>.md and <name>.png (the curves and their differences) into --out. A run whose
settings differ from the reference's beyond how it computes (the model, the data, the batch, the schedule or
the seed: a different experiment, not a different computation of one) is named with those settings, on stderr
and in the table.
"""

import argparse
import json
import os
import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file: the repository's modules are importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from checkpoint import log_losses, read_json, save_figure, write_text  # noqa: E402
from model import COMPUTE_KEYS  # noqa: E402
from scripts.bench_multigpu import fmt  # noqa: E402


# the settings that may differ between runs that compute one experiment: the compute path (train.py's compile,
# dtype, graph_step, master_weights, device and world size; the model's kernels and loss head) and bookkeeping.
# Every other key of the model and of train_config.RUN_KEYS makes the curves another experiment's.
MODEL_COMPUTE_KEYS = set(COMPUTE_KEYS)
RUN_BOOKKEEPING_KEYS = {"log_interval", "always_save_checkpoint", "save_checkpoint", "data_dir"}


def filled_model_keys(keys: dict) -> dict:
    """The model keys of `keys` as GPTConfig holds them, in JSON's types (defaults filled in: tucker_ranks_post=None
    is tucker_ranks; tuples as lists), so that a run's raw config and a built model_config compare equal; {} where
    they make no valid GPTConfig."""
    from model import GPTConfig
    try:
        return json.loads(json.dumps(GPTConfig.from_dict(keys).to_dict()))
    except (TypeError, ValueError):
        return {}


def with_model_keys_filled(keys: dict) -> dict:
    """`keys` with those of its model keys that GPTConfig fills (tucker_ranks_post=None as tucker_ranks) as it fills
    them: a run's raw config and one written filled in compare equal; no key added."""
    return {**keys, **{k: v for k, v in filled_model_keys(keys).items() if k in keys}}


def experiment_settings(run_dir) -> dict:
    """{key: value} of the settings that define a run's experiment (see MODEL_COMPUTE_KEYS): its model_config but
    the compute keys, and train_config.RUN_KEYS but the bookkeeping ones; from summary.json, else config.json (an
    interrupted run); {} where neither is there."""
    from dataclasses import fields

    from model import GPTConfig
    from train_config import RUN_KEYS

    def as_dict(x):
        return x if isinstance(x, dict) else {}
    summary = as_dict(read_json(os.path.join(run_dir, "summary.json")))
    config = as_dict(summary.get("config")) or as_dict(read_json(os.path.join(run_dir, "config.json")))
    # the model's keys: summary.json's model_config, or (an interrupted run) config.json's, which holds them all
    model = as_dict(summary.get("model_config")) or {f.name: config[f.name] for f in fields(GPTConfig) if f.name in config}
    model = {**model, **{k: v for k, v in filled_model_keys(model).items() if k in model}}  # config.json's are raw
    out = {k: v for k, v in model.items() if k not in MODEL_COMPUTE_KEYS}
    out.update({k: config[k] for k in RUN_KEYS if k in config and k not in RUN_BOOKKEEPING_KEYS})
    return out


def setting_differences(ref_dir, run_dir) -> dict:
    """{key: [reference's value, run's value]} for each experiment setting both runs record and disagree on."""
    a, b = experiment_settings(ref_dir), experiment_settings(run_dir)
    return {k: [a[k], b[k]] for k in sorted(set(a) & set(b)) if a[k] != b[k]}


def curves(run_dir) -> dict:
    """{'train': {iter: loss}, 'val': {iter: val_loss}} of one run folder."""
    train, val = log_losses(run_dir)
    return {"train": train, "val": val}


def compare(runs: list) -> dict:
    """Every run against the first (the reference): differences over the iterations both logged."""
    if len(runs) < 2:
        raise ValueError(f"compare needs at least two runs, got {len(runs)}")
    if len({os.path.realpath(r) for r in runs}) < len(runs):
        raise ValueError(f"a run is given twice: {' '.join(map(str, runs))}")
    data = {str(r): curves(r) for r in runs}
    ref_name = str(runs[0])
    ref = data[ref_name]
    for name, c in data.items():  # every run, not only the reference: a missing one is not a row of Nones
        if not c["train"]:
            raise ValueError(f"{name}: no training losses in log.jsonl (a train.py run folder?)")
    rows = []
    for name, c in data.items():
        common = sorted(set(ref["train"]) & set(c["train"]))
        diffs = [abs(c["train"][i] - ref["train"][i]) for i in common]
        rel = [abs(c["train"][i] - ref["train"][i]) / abs(ref["train"][i]) for i in common if ref["train"][i]]
        summary = read_json(os.path.join(name, "summary.json")) or {}
        last_val = c["val"][max(c["val"])] if c["val"] else None
        rows.append(dict(
            run=name, iters_compared=len(common), last_iter=max(c["train"]) if c["train"] else None,
            max_abs_diff=max(diffs) if diffs else None, mean_abs_diff=sum(diffs) / len(diffs) if diffs else None,
            max_rel_diff=max(rel) if rel else None,
            iter_of_max=common[diffs.index(max(diffs))] if diffs else None,
            final_train_loss=c["train"][max(c["train"])] if c["train"] else None, final_val_loss=last_val,
            final_val_diff=None if last_val is None or not ref["val"] else last_val - ref["val"][max(ref["val"])],
            final_val_iter=max(c["val"]) if c["val"] else None,
            config={k: summary.get("config", {}).get(k) for k in ("compile", "compile_mode", "dtype", "seed")}
            | {"loss_chunk_tokens": summary.get("model_config", {}).get("loss_chunk_tokens")},
            setting_differences=setting_differences(ref_name, name),
        ))
    return {"reference": ref_name, "rows": rows, "curves": {n: {k: {str(i): v for i, v in c[k].items()} for k in c}
                                                            for n, c in data.items()}}


def labels(runs) -> dict:
    """{run: label}: the run folder's name, or as many of its path's last parts as tell it from the other runs
    (a/mha and b/mha, not mha twice)."""
    parts = {r: Path(os.path.abspath(r)).parts for r in runs}
    out = {}
    for r in runs:
        for k in range(1, len(parts[r]) + 1):
            out[r] = "/".join(parts[r][-k:])
            if all("/".join(parts[o][-k:]) != out[r] for o in runs if o != r):
                break
    return out


def markdown(res: dict, title: str) -> str:
    lines = [f"# {title}", "",
             f"Every run against `{res['reference']}`: training loss per iteration (train.py's log), final val loss "
             "(at the iteration in brackets: runs of different lengths compare their last evaluations).",
             "", "| run | compile | mode | loss chunk | iterations compared | max abs diff (iter) | mean abs diff "
             "| max rel diff | final train loss | final val loss | val diff |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    name = labels([r["run"] for r in res["rows"]])
    for r in res["rows"]:
        c = r["config"]
        lines.append(f"| {name[r['run']]} | {c.get('compile')} | {c.get('compile_mode')} | "
                     f"{c.get('loss_chunk_tokens')} | {r['iters_compared']} | "
                     f"{fmt(r['max_abs_diff'], '.2e')} ({r['iter_of_max']}) | {fmt(r['mean_abs_diff'], '.2e')} | "
                     f"{fmt(r['max_rel_diff'], '.2e')} | {fmt(r['final_train_loss'], '.4f')} | "
                     f"{fmt(r['final_val_loss'], '.4f')} ({r.get('final_val_iter')}) | {fmt(r['final_val_diff'], '+.4f')} |")
    notes = different_experiments(res)
    if notes:
        lines += ["", "**Not the same experiment as the reference** (settings beyond how the runs compute):", ""]
        lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def different_experiments(res: dict) -> list:
    """One line a run whose experiment settings differ from the reference's: 'name: key ref -> value, ...'."""
    name = labels([r["run"] for r in res["rows"]])
    return [f"{name[r['run']]}: " + ", ".join(f"{k} {json.dumps(a)} -> {json.dumps(b)}"
                                              for k, (a, b) in r["setting_differences"].items())
            for r in res["rows"] if r.get("setting_differences")]


def plot(res: dict, path: Path, title: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    ref = {int(i): v for i, v in res["curves"][res["reference"]]["train"].items()}
    label = labels(list(res["curves"]))
    for k, (name, c) in enumerate(res["curves"].items()):
        train = {int(i): v for i, v in c["train"].items()}
        its = sorted(train)
        color = f"C{k % 10}"  # a run's color in both panels (the lower one has no reference line)
        top.plot(its, [train[i] for i in its], label=label[name], lw=1, color=color)
        if name != res["reference"]:
            common = [i for i in its if i in ref]
            bottom.plot(common, [train[i] - ref[i] for i in common], label=label[name], lw=1, color=color)
    top.set_ylabel("training loss")
    top.set_title(title)
    top.legend()
    bottom.axhline(0.0, color="gray", lw=0.5)
    bottom.set_ylabel(f"minus {label[res['reference']]}")
    bottom.legend(fontsize="small")
    bottom.set_xlabel("iteration")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return True


def main(argv=None):
    # what it does and the usage example after it (the first paragraph alone ended mid-sentence or at a colon)
    ap = argparse.ArgumentParser(description="\n\n".join(__doc__.strip().split("\n\n")[:2]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="train.py run folders; the first is the reference")
    ap.add_argument("--out", required=True, help="folder for <name>.json / .md / .png")
    ap.add_argument("--name", default="compare", help="file name stem")
    ap.add_argument("--title", default="", help="title of the table and plot (default: the name)")
    args = ap.parse_args(argv)
    if not args.name or "/" in args.name or args.name in (".", ".."):
        raise SystemExit(f"error: --name {args.name!r} is a file name stem (no folders: give them in --out)")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SystemExit(f"error: --out {out} is a file, not a folder")
    try:
        res = compare(args.runs)
    except ValueError as e:
        raise SystemExit(f"error: {e}")
    out.mkdir(parents=True, exist_ok=True)
    title = args.title or args.name
    res["command"] = "python -m scripts.compare_runs " + " ".join(argv if argv is not None else sys.argv[1:])
    for note in different_experiments(res):
        print(f"warning: not the reference's experiment: {note}", file=sys.stderr)
    write_text(out / f"{args.name}.json", json.dumps(res, indent=1))
    md = markdown(res, title)
    write_text(out / f"{args.name}.md", md + f"\n`{res['command']}`\n")
    plotted = plot(res, out / f"{args.name}.png", title)
    print(md + (f"plot: {out / (args.name + '.png')}" if plotted else "(no matplotlib: no plot)"))
    return res


if __name__ == "__main__":
    main()

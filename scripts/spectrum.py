"""
Mode spectra of the attention tensors of trained checkpoints (the paper's fig:gpt_tucker_ranks):
for every layer, the singular values of Mat_1, Mat_2, Mat_3 of the pre-softmax tensor W
(W_i = W_Q,i W_K,i^T: head, query, key modes) and of the post-softmax tensor W~
(W~_i = (W_V,i W_O,i)^T: head, output, value modes), each divided by its largest.

    python -m scripts.spectrum out-mha out-tucker --out out-spectra --labels MHA,Tucker

Any variant works (MHA, GQA, MLA, Tucker; tensor_forms.attention_tensors semantics, decoupled
RoPE's rotary dims left out). The tensors are not formed whole: scripts/convert.py's `Factored`
form gives the query/key (output/value) modes' singular values from small matrices (one d x d SVD
per mode at most), and the head mode from its nH x (p q) unfolding of the factors' inner widths
(up to convert.DENSE_LIMIT entries, else an nH x nH Gram matrix), so GPT-2 or d = 2048 models take
seconds per layer, not the nH d^2-sized unfoldings.

Writes into --out:
    spectrum_pre.png    W:  three panels (modes 1-3), per checkpoint a ribbon from the min to the
                        max over layers and the median line, log y-axis
    spectrum_post.png   the same for W~
    spectrum.json       the numbers: per checkpoint, tensor, mode and layer, the normalized
                        singular values (all min(rows, cols) of them, zeros included)

`write(results, out_dir)` writes these for spectra computed elsewhere, and `write_energy(results,
ranks, out_dir)` the energy each rank keeps per mode and layer (energy.md, energy.json; used by
scripts/convert_study.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

if not __package__:  # run as a file, the repository's modules are not importable
    sys.exit("run from the repository root as a module: python -m scripts.spectrum ...")

from scripts.convert import DENSE_LIMIT, factored_tensors, mode_svd  # noqa: E402
from checkpoint import load_checkpoint, save_figure, write_text  # noqa: E402

TENSORS = ("pre", "post")  # W, W~
MODE_TITLES = {
    "pre": ("Head mode $Mat_1(\\mathcal{W})$", "Query mode $Mat_2(\\mathcal{W})$", "Key mode $Mat_3(\\mathcal{W})$"),
    "post": ("Head mode $Mat_1(\\widetilde{\\mathcal{W}})$", "Output mode $Mat_2(\\widetilde{\\mathcal{W}})$",
             "Value mode $Mat_3(\\widetilde{\\mathcal{W}})$"),
}
FLOOR = 1e-10  # plotted values are clipped here (log axis); the JSON keeps the exact values


@torch.no_grad()
def attention_spectra(model, dense_limit: int = DENSE_LIMIT) -> Dict[str, Dict[str, List[np.ndarray]]]:
    """{'pre'|'post': {'mode1'|'mode2'|'mode3': [per layer: normalized singular values (descending)]}},
    computed in float64."""
    out = {t: {f"mode{m}": [] for m in (1, 2, 3)} for t in TENSORS}
    for block in model.transformer.h:
        for name, f in zip(TENSORS, factored_tensors(block.attn)):  # float64
            for m in (1, 2, 3):
                S = mode_svd(f, m, dense_limit=dense_limit)[0]
                top = S[0].item() if S.numel() else 0.0
                out[name][f"mode{m}"].append((S / top if top > 0 else S).cpu().numpy())
    return out


def plot(results: List[dict], out_dir: str, title: str = "") -> List[str]:
    """One figure per tensor, one panel per mode: ribbon (min..max over layers) and median per checkpoint;
    `title` goes before each figure's heading."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    paths = []
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for name in TENSORS:
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        for m, ax in enumerate(axes, start=1):
            for j, res in enumerate(results):
                S = np.clip(np.stack(res["spectra"][name][f"mode{m}"]), FLOOR, None)  # (layers, n)
                x = np.arange(1, S.shape[1] + 1)
                color = colors[j % len(colors)]
                ax.fill_between(x, S.min(0), S.max(0), color=color, alpha=0.25, linewidth=0)
                ax.plot(x, np.median(S, axis=0), color=color, label=res["label"], linewidth=1.4)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_yscale("log")
            ax.set_ylim(FLOOR / 2, 2.0)
            ax.set_title(MODE_TITLES[name][m - 1])
            ax.set_xlabel("singular value index")
            ax.grid(True, which="major", alpha=0.3)
        axes[0].set_ylabel("normalized singular value")
        axes[0].legend()
        fig.suptitle(title + ("pre-softmax" if name == "pre" else "post-softmax") +
                     " attention tensor: ribbon = min..max over layers, line = median")
        fig.tight_layout()
        path = os.path.join(out_dir, f"spectrum_{name}.png")
        save_figure(fig, path, dpi=120)
        paths.append(path)
    return paths


def load_results(json_path: str) -> List[dict]:
    """`results` as `write` takes them, back from a spectrum.json (to redraw its figures)."""
    with open(json_path) as f:
        data = json.load(f)
    return [dict(label=c["label"], path=c["path"], model_config=c["model_config"],
                 spectra={t: {m: [np.asarray(s, dtype=np.float64) for s in per_layer] for m, per_layer in c["spectra"][t].items()}
                          for t in TENSORS}) for c in data["checkpoints"]]


def main(argv: Optional[List[str]] = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoints", nargs="+", help="out_dir folders (with ckpt.pt) or .pt files")
    # not results/spectra: that folder is the committed study's (convert_study writes it), and a quick look at some
    # checkpoint without --out replaced its figures and spectrum.json, out of step with its energy.md
    ap.add_argument("--out", default="out-spectra", help="folder for the PNGs and spectrum.json (default: %(default)s)")
    ap.add_argument("--labels", help="comma-separated labels, one per checkpoint (default: folder names)")
    args = ap.parse_args(argv)
    labels = args.labels.split(",") if args.labels else [Path(p.rstrip("/")).name for p in args.checkpoints]
    if len(labels) != len(args.checkpoints):
        print(f"error: {len(labels)} labels for {len(args.checkpoints)} checkpoints", file=sys.stderr)
        sys.exit(2)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        print(f"error: --out {args.out} is a file, not a folder", file=sys.stderr)
        sys.exit(2)
    results = []
    for path, label in zip(args.checkpoints, labels):
        try:
            model, _ = load_checkpoint(path)
        except (FileNotFoundError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        c = model.config
        print(f"{label}: {path} ({c.attn}, {c.n_layer} layers, d={c.n_embd}, nH={c.n_head})")
        results.append(dict(label=label, path=str(path), model_config=c.to_dict(), spectra=attention_spectra(model)))
    return write(results, args.out)


def write(results: List[dict], out_dir: str) -> dict:
    """The two figures (if matplotlib is there) and spectrum.json for `results`
    ([{label, path, model_config, spectra}])."""
    os.makedirs(out_dir, exist_ok=True)
    try:
        paths = plot(results, out_dir)
    except ImportError as e:  # a GPU machine without matplotlib: the JSON still holds everything
        print(f"warning: no figures ({e}); draw them later from spectrum.json", file=sys.stderr)
        paths = []
    data = dict(
        note="normalized singular values (divided by the largest) of the mode-j unfoldings of W (pre) and W~ "
             "(post), per layer; mode1 = heads (nH values), mode2 = query/output and mode3 = key/value (d values)",
        checkpoints=[dict(label=r["label"], path=r["path"], model_config=r["model_config"],
                          spectra={t: {m: [[float(f"{v:.8g}") for v in s] for s in per_layer]
                                       for m, per_layer in r["spectra"][t].items()} for t in TENSORS})
                     for r in results])
    json_path = os.path.join(out_dir, "spectrum.json")
    write_text(json_path, json.dumps(data))
    print("wrote " + ", ".join(paths + [json_path]))
    return data


def energy(s: np.ndarray, r: int) -> float:
    """Share of the squared singular values s kept by the leading r: the squared Frobenius norm a
    rank-r truncation of that one unfolding keeps (1 - energy is its squared relative error)."""
    s2 = np.asarray(s, dtype=np.float64) ** 2
    total = s2.sum()
    return float(s2[:r].sum() / total) if total > 0 else 1.0


def energy_ranks(ranks: List[List[int]]) -> Dict[str, List[int]]:
    """energy.json's `ranks`: per mode, the ranks the Tucker targets ([(r1, r2, r3), ...]) use there, largest first."""
    return {f"mode{m}": sorted({r[m - 1] for r in ranks}, reverse=True) for m in (1, 2, 3)}


def write_energy(results: List[dict], ranks: List[List[int]], out_dir: str) -> dict:
    """energy.json and energy.md: per checkpoint, tensor (W, W~), mode and layer, the energy kept at
    every rank the Tucker targets use in that mode (ranks: [(r1, r2, r3), ...])."""
    per_mode = energy_ranks(ranks)
    data = dict(note="energy(r) = sum of the r largest squared singular values / sum of all, per mode unfolding "
                     "and layer; ranks = the Tucker targets' (r1, r2, r3)", ranks=per_mode, checkpoints=[])
    lines = ["Energy kept at each rank: sum_{k<=r} s_k^2 / sum_k s_k^2 of each mode unfolding, per layer "
             "(W: pre-softmax, W~: post-softmax; mode 1 heads, 2 query/output, 3 key/value).", ""]
    cols = [(t, m, r) for t in TENSORS for m in per_mode for r in per_mode[m]]
    name = {"pre": "W", "post": "W~"}
    for res in results:
        layers = len(res["spectra"]["pre"]["mode1"])
        table = {t: {m: {str(r): [energy(res["spectra"][t][m][i], r) for i in range(layers)] for r in per_mode[m]}
                     for m in per_mode} for t in TENSORS}
        data["checkpoints"].append(dict(label=res["label"], path=res["path"], energy=table))
        lines += [f"**{res['label']}** (`{res['path']}`)", "",
                  "| layer | " + " | ".join(f"{name[t]} {m}@{r}" for t, m, r in cols) + " |",
                  "| ---: | " + " | ".join("---:" for _ in cols) + " |"]
        for i in range(layers):
            lines.append(f"| {i} | " + " | ".join(f"{table[t][m][str(r)][i]:.3f}" for t, m, r in cols) + " |")
        lines.append("| mean | " + " | ".join(f"{np.mean(table[t][m][str(r)]):.3f}" for t, m, r in cols) + " |")
        lines.append("")
    os.makedirs(out_dir, exist_ok=True)
    write_text(os.path.join(out_dir, "energy.json"), json.dumps(data, indent=1))
    write_text(os.path.join(out_dir, "energy.md"), "\n".join(lines))
    return data


if __name__ == "__main__":
    main()

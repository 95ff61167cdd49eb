"""
The MHA -> Tucker conversion study (issue 7) on small GPTs trained on CPU, in one command:

    python -m scripts.convert_study --data_dir=data/shakespeare --work_dir=/tmp/issue7 \
        --max_iters=50 --finetune_iters=20

1. trains (train.py, float32, no compile) a small GPT with MHA and, from scratch, with separated
   Tucker attention at each of --ranks (default [8,128,128], [8,64,64], [4,32,32]);
2. converts the best MHA checkpoint to Tucker at each rank (scripts/convert.py, HOSVD of W and W~),
   evaluates the converted model on the whole val split, and fine-tunes a copy of it for
   --finetune_iters iterations (train.py --init_from=resume);
3. writes <results_dir>/table.md and table.json, and the mode spectra (scripts/spectrum.py) of the
   MHA run and of the Tucker runs at the last two --ranks into <spectra_dir>.

Every val loss in the table is the one train.py reports with eval_full_val=True: the token mean
over all non-overlapping block_size windows of val.bin, in order (for runs: the best evaluation).
convert.py's own before/after numbers (a few random val batches) are kept in table.json.

Resumable: a training run with summary.json, a conversion with convert.json and an evaluated
conversion with full_val.json are skipped, so an interrupted study continues where it stopped
(delete a folder to redo it). Run folders go under --work_dir, only the tables and spectra into
the repository. Child processes get OMP_NUM_THREADS=--threads (on a 2-core CPU one thread per
process was twice as fast as two for this model size).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
if not __package__:  # run as a file, the repository's modules are not importable
    sys.exit("run from the repository root as a module: python -m scripts.convert_study ...")

MODEL = dict(n_layer=4, n_head=8, n_embd=128, block_size=128, bias=False, pos_emb="learned")
OPTIM = dict(batch_size=16, learning_rate=2e-3, min_lr=2e-4)


def ranks_name(r) -> str:
    return "_".join(str(x) for x in r)


def schedule(iters: int) -> dict:
    """Cosine over the run; warmup 20 iterations, or a fifth of a shorter run; eval every 50 (or at the end)."""
    return dict(max_iters=iters, lr_decay_iters=iters, warmup_iters=max(1, min(20, iters // 5)),
                eval_interval=min(50, iters))


def train_args(out_dir: Path, data_dir: str, iters: int, **extra) -> list:
    keys = dict(data_dir=data_dir, out_dir=str(out_dir), device="cpu", dtype="float32", compile=False,
                **MODEL, **OPTIM, **schedule(iters), eval_full_val=True, eval_iters=5, log_interval=10,
                always_save_checkpoint=False, **extra)
    return [f"--{k}={v}" for k, v in keys.items()]


def run(cmd: list, log: Path, env: dict):
    print("$ " + " ".join(["python", *cmd[1:]] if cmd[0] == sys.executable else cmd), flush=True)
    with open(log, "w") as f:
        res = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env)
    if res.returncode != 0:
        sys.exit(f"failed (exit {res.returncode}); see {log}")


def train(out_dir: Path, args, env, iters: int, **extra) -> dict:
    summary = out_dir / "summary.json"
    if not summary.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        run([sys.executable, "train.py", *train_args(out_dir, args.data_dir, iters, **extra)],
            out_dir / "train.log", env)
    else:
        print(f"skip {out_dir} (summary.json exists)")
    return json.loads(summary.read_text())


@torch.no_grad()
def full_val_loss(ckpt_dir: Path, data_dir: str, batch_size: int) -> float:
    """train.py's eval_full_val: token-mean loss over all non-overlapping block_size windows of val.bin."""
    from checkpoint import load_checkpoint
    from evaluate import split_loss
    model, _ = load_checkpoint(str(ckpt_dir))
    return split_loss(model.float(), os.path.join(data_dir, "val.bin"), model.config.block_size, batch_size,
                      0, full=True, device=torch.device("cpu"))


def convert_and_finetune(r, mha_dir: Path, args, env) -> dict:
    name = ranks_name(r)
    conv_dir = Path(args.work_dir) / f"convert_{name}"
    if not (conv_dir / "convert.json").exists():
        run([sys.executable, "-m", "scripts.convert", f"--in_dir={mha_dir}", "--to=tucker",
             f"--ranks={','.join(map(str, r))}", f"--out_dir={conv_dir}", f"--data_dir={args.data_dir}",
             f"--eval_batches={args.convert_eval_batches}", "--batch_size=8"], conv_dir.with_suffix(".log"), env)
    else:
        print(f"skip {conv_dir} (convert.json exists)")
    info = json.loads((conv_dir / "convert.json").read_text())
    fv = conv_dir / "full_val.json"
    if not fv.exists():
        fv.write_text(json.dumps({"val_loss": full_val_loss(conv_dir, args.data_dir, OPTIM["batch_size"])}))
    converted = json.loads(fv.read_text())["val_loss"]
    ft_dir = Path(args.work_dir) / f"finetune_{name}"
    if not (ft_dir / "summary.json").exists():  # fine-tune a fresh copy (convert.py's docs)
        shutil.rmtree(ft_dir, ignore_errors=True)
        ft_dir.mkdir(parents=True)
        shutil.copy2(conv_dir / "ckpt.pt", ft_dir / "ckpt.pt")
    ft = train(ft_dir, args, env, args.finetune_iters, init_from="resume")
    return dict(convert=info, converted_val_loss=converted, finetune=ft)


def mean(xs):
    return sum(xs) / len(xs)


def fmt(x, nd=3):
    return "n/a" if x is None else f"{x:.{nd}f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data_dir", required=True, help="folder with train.bin and val.bin (data/shakespeare/prepare.py)")
    ap.add_argument("--work_dir", required=True, help="run folders (outside the repository)")
    ap.add_argument("--max_iters", type=int, default=50, help="iterations of each run trained from scratch")
    ap.add_argument("--finetune_iters", type=int, default=20, help="iterations of each fine-tune after conversion")
    ap.add_argument("--ranks", nargs="+", default=["8,128,128", "8,64,64", "4,32,32"], help="Tucker ranks r1,r2,r3")
    ap.add_argument("--convert_eval_batches", type=int, default=5, help="convert.py's own quick before/after val batches")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every child process")
    ap.add_argument("--results_dir", default=str(REPO / "results" / "convert"))
    ap.add_argument("--spectra_dir", default=str(REPO / "results" / "spectra"), help="'' to skip the spectra")
    args = ap.parse_args(argv)
    ranks = [tuple(int(v) for v in s.split(",")) for s in args.ranks]
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    torch.set_num_threads(args.threads)

    mha_dir = work / "mha"
    mha = train(mha_dir, args, env, args.max_iters, attn="mha")
    scratch = {r: train(work / f"tucker_{ranks_name(r)}", args, env, args.max_iters, attn="tucker",
                        tucker_ranks=r, shared_kv=False) for r in ranks}
    conv = {r: convert_and_finetune(r, mha_dir, args, env) for r in ranks}
    check = mha_dir / "full_val.json"  # the same evaluation on the MHA checkpoint must give its best val loss
    if not check.exists():
        check.write_text(json.dumps({"val_loss": full_val_loss(mha_dir, args.data_dir, OPTIM["batch_size"])}))
    mha_check = json.loads(check.read_text())["val_loss"]
    print(f"MHA checkpoint re-evaluated: {mha_check:.4f} (train.py best: {mha['best_val_loss']:.4f})")

    rows = []
    for r in ranks:
        c, s = conv[r], scratch[r]
        layers = c["convert"]["layers"]
        rows.append(dict(
            ranks=list(r), attn_params=s["attn_params"], kv_values_per_token_per_layer=s["kv_values_per_token_per_layer"],
            mha_val_loss=mha["best_val_loss"], mha_best_iter=mha["best_iter"],
            converted_val_loss=c["converted_val_loss"],
            finetuned_val_loss=c["finetune"]["best_val_loss"], finetune_best_iter=c["finetune"]["best_iter"],
            finetune_iters=c["finetune"]["iters"],
            scratch_val_loss=s["best_val_loss"], scratch_best_iter=s["best_iter"], scratch_iters=s["iters"],
            W_rel_err_mean=mean([l["W_rel_err"] for l in layers]), Wt_rel_err_mean=mean([l["Wt_rel_err"] for l in layers]),
            W_rel_err_layers=[l["W_rel_err"] for l in layers], Wt_rel_err_layers=[l["Wt_rel_err"] for l in layers],
            convert_py_val_loss=dict(before=c["convert"]["val_loss_before"], after=c["convert"]["val_loss_after"],
                                     eval_batches=c["convert"]["eval_batches"], batch_size=c["convert"]["batch_size"]),
            wall_time_s=dict(scratch=s["wall_time_s"], finetune=c["finetune"]["wall_time_s"]),
        ))
    setup = dict(model={**MODEL, "vocab_size": mha["model_config"]["vocab_size"]}, optim=OPTIM,
                 schedule=schedule(args.max_iters), finetune_schedule=schedule(args.finetune_iters),
                 device="cpu float32", threads=args.threads, torch_version=mha["torch_version"],
                 git_commit=mha["git_commit"], data_dir=args.data_dir,
                 mha=dict(val_loss=mha["best_val_loss"], best_iter=mha["best_iter"], iters=mha["iters"],
                          attn_params=mha["attn_params"], kv_values_per_token_per_layer=mha["kv_values_per_token_per_layer"],
                          wall_time_s=mha["wall_time_s"], val_loss_reevaluated=mha_check),
                 val_loss="train.py eval_full_val: token mean over all non-overlapping windows of val.bin; "
                          "runs: the best evaluation")
    out = Path(args.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.json").write_text(json.dumps(dict(setup=setup, rows=rows), indent=2) + "\n")

    m = setup["mha"]
    lines = [
        f"MHA -> Tucker (separated KV) conversion on a small GPT trained on CPU ({MODEL['n_layer']} layers, "
        f"{MODEL['n_head']} heads, d={MODEL['n_embd']}, block {MODEL['block_size']}, batch {OPTIM['batch_size']}, "
        f"learned positions; tiny Shakespeare, GPT-2 BPE). Val loss on the whole val split (train.py eval_full_val).",
        f"MHA source: {m['iters']} iterations, best val loss {m['val_loss']:.3f} at iteration {m['best_iter']}, "
        f"{m['attn_params']:,} attention params. Fine-tune: {args.finetune_iters} iterations from the converted model.",
        "",
        "| Tucker ranks | attn params | MHA source | converted (no fine-tune) | + fine-tune | Tucker from scratch | "
        "mean rel. err W | mean rel. err W~ |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| [{','.join(map(str, row['ranks']))}] | {row['attn_params']:,} | {fmt(row['mha_val_loss'])} "
            f"({m['iters']} it) | {fmt(row['converted_val_loss'])} | {fmt(row['finetuned_val_loss'])} "
            f"({m['iters']} + {row['finetune_iters']} it) | {fmt(row['scratch_val_loss'])} ({row['scratch_iters']} it) | "
            f"{row['W_rel_err_mean']:.3f} | {row['Wt_rel_err_mean']:.3f} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    if args.spectra_dir:
        low = ranks[-2:]  # the two lowest ranks of --ranks (default [8,64,64] and [4,32,32])
        dirs = [str(mha_dir)] + [str(work / f"tucker_{ranks_name(r)}") for r in low]
        labels = ["MHA"] + [f"Tucker {'-'.join(map(str, r))}" for r in low]  # --labels is comma-separated
        run([sys.executable, "-m", "scripts.spectrum", *dirs, f"--labels={','.join(labels)}", "--out", args.spectra_dir],
            work / "spectrum.log", env)
        print(f"wrote {args.spectra_dir}")
    print(f"wrote {out / 'table.md'} and {out / 'table.json'}")


if __name__ == "__main__":
    main()

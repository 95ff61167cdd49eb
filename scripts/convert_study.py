"""
The conversion study (issue 17): trained MHA checkpoints converted into Tucker, GQA and MLA, their
val loss right after conversion and after a short fine-tune, against the same variant trained from
scratch; and the mode spectra of W and W~ (trained MHA, trained Tucker, random initialization) with
the energy each rank keeps, per layer. One command on the GPU machine (scripts/gpu_session.sh's
`enwiki_convert=DEADLINE` stage runs it, as below but into its own results folders, after training the seed-2
checkpoints; results/convert/README.md):

    python -m scripts.convert_study \\
        --mha out-enwiki/runs/mha-rope_off-s2 out-enwiki/runs/mha-rope_on-s2 \\
        --tucker out-enwiki/runs/tucker_8_64_64-rope_off-s2 --data_dir data/enwiki \\
        --work_dir out-convert --results_dir results/convert --spectra_dir results/spectra \\
        --gpus 0,1 --time_budget 420

For every MHA source (one with learned positions, one with RoPE; the work folder is named by
pos_emb) and every target of --targets (row ids of scripts/paper_tables.py's enwiki table:
tucker_R1_R2_R3, gqaN, mla_sharedN; default the six of the issue):

1. convert (scripts/convert.py's `convert`: HOSVD of W and W~, GQA head selection, MLA truncated
   SVD; on the CPU in float64). RoPE sources: GQA keeps RoPE in the head dims (exact structure);
   Tucker and MLA get latent RoPE (--allow_rope_change), which is NOT the source's function even
   at full rank;
2. evaluate the converted model in this process: the whole val split (train.py's eval_full_val,
   bf16 autocast on a GPU) and, in float32 on the first --err_windows val windows, the relative
   error of the logits and of every layer's attention output against the source (both attentions
   fed the source's residual stream, so layer errors do not compound);
3. fine-tune a copy (train.py --init_from=resume, a subprocess, one per GPU of --gpus) for
   max(--finetune_iters) iterations at a constant learning rate (--finetune_lr, default the source
   run's min_lr: 6e-5, the protocol's final rate; decay_lr=False, no warmup; the fresh AdamW state
   of convert.py; batch, seed and data of the source run), evaluating the whole val split every
   gcd(--finetune_iters) iterations; no checkpoint is written.

`tucker_full` (ranks nH, d, d; evaluated, never fine-tuned) is added unless --no-full_rank_check:
with learned positions it must reproduce the source exactly; with RoPE its error is the RoPE
mismatch alone (RoPE in the head dims vs one rotation in the key latent), apart from truncation.
The from-scratch column reads --scratch_dir/<target>-rope_<off|on>-s<seed>/summary.json
(final_val_loss; RoPE MLA: the latent-RoPE row mla_shared_latentN if it exists, else the
decoupled-RoPE row, marked). Spectra: scripts/spectrum.py's spectra of every source, of --tucker
and of a randomly initialized GPT of the first source's shape, plus the energy (share of the
squared singular values) kept at each rank of the targets, per tensor, mode and layer.

Writes --results_dir/table.md, table.json, finetune.png; --spectra_dir/spectrum_pre.png,
spectrum_post.png, spectrum.json, energy.md, energy.json (without matplotlib: no figures, a warning;
`python -m scripts.convert_study --plot_only --results_dir ... --spectra_dir ...` draws them later
from the JSON). Resumable: a conversion with eval.json
and a fine-tune with a finished summary.json are skipped (delete a folder to redo it); after
--time_budget seconds no conversion or fine-tune starts (a started one finishes), and the tables
say "not run" for what is missing. Every command run is printed.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from queue import Queue

import torch

REPO = Path(__file__).resolve().parents[1]
if not __package__:  # run as a file, the repository's modules are not importable
    sys.exit("run from the repository root as a module: python -m scripts.convert_study ...")

from checkpoint import load_checkpoint, read_json, read_log, write_text  # noqa: E402
from evaluate import Batches, split_loss  # noqa: E402
from model import GPT  # noqa: E402
from scripts import convert as cv  # noqa: E402
from scripts import spectrum  # noqa: E402

TARGETS = ("tucker_8_128_128", "tucker_8_128_64", "tucker_8_64_64", "gqa2", "gqa4", "mla_shared128")
FULL = "tucker_full"


def target_kwargs(name: str, config) -> dict:
    """convert.convert's keywords for a target row id (tucker_R1_R2_R3, tucker_shared_R1_R2_R3, gqaN,
    mla_sharedN, tucker_full). RoPE to latent RoPE is allowed: the study measures how far off it is."""
    rope = dict(allow_rope_change=True)
    if name == FULL:
        return dict(to="tucker", ranks=(config.n_head, config.n_embd, config.n_embd), **rope)
    m = re.fullmatch(r"tucker(_shared)?_(\d+)_(\d+)_(\d+)", name)
    if m:
        return dict(to="tucker", ranks=tuple(int(v) for v in m.groups()[1:]), shared_kv=bool(m.group(1)), **rope)
    m = re.fullmatch(r"gqa(\d+)", name)
    if m:
        return dict(to="gqa", n_kv_head=int(m.group(1)))
    m = re.fullmatch(r"mla_shared(\d+)", name)
    if m:
        r = int(m.group(1))
        return dict(to="mla", kv_rank=r, q_rank=r, shared_kv=True, **rope)
    raise ValueError(f"unknown target {name!r}: use tucker_R1_R2_R3, tucker_shared_R1_R2_R3, gqaN or mla_sharedN")


def scratch_rows(name: str, rope: str) -> list:
    """enwiki row ids to compare a converted target with, best first (RoPE MLA: latent RoPE first)."""
    m = re.fullmatch(r"mla_shared(\d+)", name)
    if m and rope == "on":
        return [f"mla_shared_latent{m.group(1)}", name]
    return [name]


def rope_tag(config) -> str:
    return "on" if config.pos_emb == "rope" else "off"


def show(cmd: list) -> str:
    return " ".join(["python", *cmd[1:]] if cmd[0] == sys.executable else cmd)


def finished(run_dir: Path) -> bool:
    s = read_json(run_dir / "summary.json")
    return bool(s and s.get("finished"))


def val_curve(run_dir: Path) -> dict:
    """{iteration: whole-split val loss} from train.py's log.jsonl."""
    return {int(r["iter"]): r["val_loss"] for r in read_log(run_dir) if r.get("val_loss") is not None}


def autocast_for(device: torch.device, dtype: str):
    if device.type == "cuda" and dtype != "float32":
        return torch.autocast(device_type="cuda", dtype=getattr(torch, dtype))
    return contextlib.nullcontext()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@torch.no_grad()
def output_errors(src: GPT, conv: GPT, idx: torch.Tensor) -> dict:
    """Relative error (float32) of the converted model's logits, and of each layer's attention
    output with both attentions fed the source's residual stream (ln_1 of it)."""
    def rope_of(m):
        return (m.rope_cos, m.rope_sin) if m.config.pos_emb == "rope" else None
    errs = []
    x = src.transformer.wte(idx)
    if src.transformer.wpe is not None:
        x = x + src.transformer.wpe(torch.arange(idx.size(1), device=idx.device))
    for bs, bc in zip(src.transformer.h, conv.transformer.h):
        h = bs.ln_1(x)
        a = bs.attn(h, rope_of(src))
        errs.append(rel(bc.attn(h, rope_of(conv)), a))
        x = x + a
        x = x + bs.mlp(bs.ln_2(x))
    logits_src, logits_conv = src(idx)[0], conv(idx)[0]
    return dict(logit_rel_err=rel(logits_conv, logits_src), attn_out_rel_err_layers=errs,
                attn_out_rel_err_mean=sum(errs) / len(errs))


class Study:
    def __init__(self, args):
        self.args = args
        self.t0 = time.time()
        self.work = Path(args.work_dir)
        self.device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.gpus = [g for g in (args.gpus or "").split(",") if g] if self.device.type == "cuda" else []
        self.slots = Queue()
        for i in range(max(1, len(self.gpus))):
            self.slots.put(i)
        self.pool = ThreadPoolExecutor(max_workers=max(1, len(self.gpus)))
        self.futures = []
        self.lock = threading.Lock()
        self.lengths = sorted(set(args.finetune_iters))
        positive = [n for n in self.lengths if n > 0]
        self.ft_iters = max(positive) if positive else 0
        self.ft_interval = math.gcd(*positive) if positive else 0

    def elapsed(self) -> float:
        return time.time() - self.t0

    def out_of_time(self) -> bool:
        return bool(self.args.time_budget) and self.elapsed() > self.args.time_budget

    def say(self, msg: str):
        with self.lock:
            print(f"[{self.elapsed():6.0f}s] {msg}", flush=True)

    # --- sources ----------------------------------------------------------------------------

    def load_source(self, path: str, targets=()) -> dict:
        """The source MHA (on the CPU, float32), its run's keys and summary; None (a warning) if its
        run has not finished (a checkpoint of a run cut off mid-way is not the trained model). A ValueError naming
        the target where one of `targets` is unknown or does not fit the source's sizes, before its evaluation."""
        run_dir = Path(path) if os.path.isdir(path) else Path(path).parent  # --mha takes a run folder or its ckpt.pt
        summary = read_json(run_dir / "summary.json") or {}
        if not summary.get("finished") and not self.args.allow_unfinished:
            print(f"warning: {path}: its summary.json does not say finished (run cut off?): skipped "
                  "(--allow_unfinished converts it anyway)", file=sys.stderr)
            return None
        stamp = os.path.getmtime(os.path.join(path, "ckpt.pt") if os.path.isdir(path) else path)
        model, ckpt = load_checkpoint(path)
        model = model.float().eval()
        cfg = dict(ckpt.get("config") or {})
        cfg = {**cfg, **(summary.get("config") or {})}  # the run's resolved training keys
        del ckpt
        if model.config.pos_emb not in ("learned", "rope"):  # rope_tag / tag would call it 'learned' beside those rows
            raise ValueError(f"{path} has pos_emb={model.config.pos_emb!r}: the study compares its conversions with the "
                             "enwiki table's runs, trained with 'learned' positions or 'rope'")
        tag = "rope" if model.config.pos_emb == "rope" else "learned"
        for t in targets:
            try:
                cv.target_config(model.config, **target_kwargs(t, model.config))
            except ValueError as e:
                raise ValueError(f"target {t} does not fit the {tag} source {path}: {e}") from None
        dtype = self.args.dtype or (cfg.get("dtype") if self.device.type == "cuda" else "float32") or "float32"
        src = dict(path=str(path), tag=tag, rope=rope_tag(model.config), model=model, cfg=cfg, dtype=dtype, stamp=stamp,
                   summary={k: summary.get(k) for k in ("final_val_loss", "best_val_loss", "iters", "attn_params",
                                                         "kv_values_per_token_per_layer", "wall_time_s", "git_commit")})
        ev_path = self.work / tag / "source_eval.json"
        ev = read_json(ev_path)
        if ev is not None and ev.get("source_stamp") != stamp:  # a new checkpoint: all of this source's work is stale
            self.say(f"{path} changed since {self.work / tag} was made: redoing it")
            shutil.rmtree(self.work / tag)
            ev = None
        if ev is None:
            dev_model = model.to(self.device)
            ev = dict(val_loss=self.full_val(dev_model, dtype), source=str(path), source_stamp=stamp)
            model.cpu()
            ev_path.parent.mkdir(parents=True, exist_ok=True)
            ev_path.write_text(json.dumps(ev))
        src["val_loss_reevaluated"] = ev["val_loss"]
        self.say(f"source {tag}: {path} ({model.config.attn}, pos_emb={model.config.pos_emb}): val loss "
                 f"{ev['val_loss']:.4f} here, {src['summary']['final_val_loss']} in its summary.json")
        return src

    def full_val(self, model: GPT, dtype: str) -> float:
        return split_loss(model, os.path.join(self.args.data_dir, "val.bin"), model.config.block_size,
                          self.args.eval_batch_size, 0, full=True, device=self.device,
                          autocast=autocast_for(self.device, dtype),
                          progress=lambda done, total: self.say(f"  val loss: batch {done} of {total}"))

    def error_batch(self, block_size: int) -> torch.Tensor:
        b = Batches(os.path.join(self.args.data_dir, "val.bin"), block_size, 1, seed=0)
        offsets = torch.arange(self.args.err_windows) * block_size
        return b.get(offsets, self.device)[0]

    # --- one (source, target) ---------------------------------------------------------------

    def convert_one(self, src: dict, target: str, finetune: bool) -> dict:
        tdir = self.work / src["tag"] / target
        conv_dir = tdir / "convert"
        ev = read_json(conv_dir / "eval.json")
        need_ckpt = finetune and not finished(tdir / "finetune")
        if ev is not None and (not need_ckpt or (conv_dir / "ckpt.pt").exists()):
            self.say(f"skip {conv_dir} (eval.json exists)")
            return ev
        if self.out_of_time():
            self.say(f"time budget spent: {src['tag']} -> {target} not converted")
            return None
        kw = target_kwargs(target, src["model"].config)
        t = time.time()
        out, layers = cv.convert(src["model"], **kw)
        out = out.float().eval()
        t_conv = time.time() - t
        smodel, omodel = src["model"].to(self.device), out.to(self.device)
        idx = self.error_batch(smodel.config.block_size)
        errors = output_errors(smodel, omodel, idx)
        loss = self.full_val(omodel, src["dtype"])
        smodel.cpu()
        out = omodel.cpu()
        del omodel
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        ev = dict(source=src["path"], positions=src["tag"], target=target, convert_kwargs={k: list(v) if isinstance(v, tuple) else v for k, v in kw.items()},
                  model_config=out.config.to_dict(), attn_params=out.attn_params(),
                  kv_values_per_token_per_layer=out.kv_values_per_token_per_layer(),
                  val_loss=loss, err_windows=self.args.err_windows, **errors,
                  W_rel_err_layers=[l["W_rel_err"] for l in layers], Wt_rel_err_layers=[l["Wt_rel_err"] for l in layers],
                  convert_s=t_conv)
        if finetune:  # train.py's checkpoint (iteration 0, fresh AdamW state)
            c = src["cfg"]
            cv.write_checkpoint(out, str(conv_dir), c, dict(source=src["path"], to=target, layers=layers),
                                c.get("weight_decay", 0.1), (c.get("beta1", 0.9), c.get("beta2", 0.95)))
        conv_dir.mkdir(parents=True, exist_ok=True)
        (conv_dir / "eval.json").write_text(json.dumps(ev, indent=1))
        self.say(f"{src['tag']} -> {target}: converted in {t_conv:.0f}s, val loss {loss:.4f}, logit rel. err "
                 f"{errors['logit_rel_err']:.3g}, attn-out rel. err {errors['attn_out_rel_err_mean']:.3g}, "
                 f"W {sum(ev['W_rel_err_layers']) / len(layers):.3g}, W~ {sum(ev['Wt_rel_err_layers']) / len(layers):.3g}")
        return ev

    def finetune_argv(self, src: dict, ft_dir: Path, gpu_device: str) -> list:
        c, a = src["cfg"], self.args
        lr = a.finetune_lr if a.finetune_lr is not None else c.get("min_lr", 6e-5)
        keys = dict(init_from="resume", out_dir=str(ft_dir), data_dir=a.data_dir, device=gpu_device,
                    dtype=src["dtype"], compile=a.compile, max_iters=self.ft_iters, eval_interval=self.ft_interval,
                    eval_iters=a.finetune_eval_iters, eval_full_val=True, decay_lr=False, learning_rate=lr,
                    batch_size=a.batch_size or c.get("batch_size", 32),
                    gradient_accumulation_steps=c.get("gradient_accumulation_steps", 1),
                    weight_decay=c.get("weight_decay", 0.1), beta1=c.get("beta1", 0.9), beta2=c.get("beta2", 0.95),
                    grad_clip=c.get("grad_clip", 1.0), seed=c.get("seed", 1337), save_checkpoint=False,
                    log_interval=max(1, min(10, self.ft_iters)))
        return [f"--{k}={v}" for k, v in keys.items()]

    def finetune(self, src: dict, target: str):
        tdir = self.work / src["tag"] / target
        ft_dir, conv_dir = tdir / "finetune", tdir / "convert"
        if finished(ft_dir):
            self.say(f"skip {ft_dir} (finished)")
            return
        slot = self.slots.get()
        try:
            if self.out_of_time():
                self.say(f"time budget spent: fine-tune {src['tag']} -> {target} not started")
                return
            shutil.rmtree(ft_dir, ignore_errors=True)
            ft_dir.mkdir(parents=True)
            try:  # train.py with save_checkpoint=False only reads it: a hard link is enough
                os.link(conv_dir / "ckpt.pt", ft_dir / "ckpt.pt")
            except OSError:
                shutil.copy2(conv_dir / "ckpt.pt", ft_dir / "ckpt.pt")
            gpu = self.gpus[slot % len(self.gpus)] if self.gpus else None
            argv = self.finetune_argv(src, ft_dir, "cuda" if gpu is not None else str(self.device))
            cmd = [sys.executable, "train.py", *argv]
            self.say(f"$ {'CUDA_VISIBLE_DEVICES=' + gpu + ' ' if gpu is not None else ''}{show(cmd)}")
            t = time.time()
            log = ft_dir / "train.log"
            if self.args.inprocess:  # CPU smoke tests: no interpreter start per fine-tune
                import train
                buf = io.StringIO()
                rc = 0
                with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                    try:
                        train.main(argv)
                    except SystemExit as e:
                        rc = e.code if isinstance(e.code, int) else 1
                log.write_text(buf.getvalue())
            else:
                env = dict(os.environ)
                if gpu is not None:
                    env["CUDA_VISIBLE_DEVICES"] = gpu
                with open(log, "w") as f:
                    rc = subprocess.call(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env)
            (ft_dir / "ckpt.pt").unlink(missing_ok=True)
            curve = val_curve(ft_dir)
            self.say(f"fine-tune {src['tag']} -> {target}: {'ok' if rc == 0 and finished(ft_dir) else f'FAILED (rc={rc}, {log})'} "
                     f"in {time.time() - t:.0f}s; val " + ", ".join(f"{k}: {v:.4f}" for k, v in sorted(curve.items())))
        finally:
            self.slots.put(slot)

    # --- spectra ------------------------------------------------------------------------------

    def spectra(self, sources: list, ranks: list):
        out = Path(self.args.spectra_dir)
        if self.out_of_time():
            self.say("time budget spent: spectra not computed")
            return
        entries = [(f"MHA {s['tag']}", s["path"], s["model"]) for s in sources]
        if self.args.tucker and not (Path(self.args.tucker) / "ckpt.pt").exists() and not Path(self.args.tucker).is_file():
            print(f"warning: no checkpoint in {self.args.tucker}: spectra without a trained Tucker", file=sys.stderr)
        elif self.args.tucker:
            tm, _ = load_checkpoint(self.args.tucker)
            c = tm.config
            name = "Tucker " + "-".join(map(str, c.tucker_ranks)) + (" rope" if c.pos_emb == "rope" else " learned")
            entries.append((name, self.args.tucker, tm))
        torch.manual_seed(self.args.init_seed)
        entries.append(("random init (MHA)", f"GPT(config of {sources[0]['path']}), seed {self.args.init_seed}",
                        GPT(sources[0]["model"].config)))
        labels = [e[0] for e in entries]
        old, old_energy = read_json(out / "spectrum.json"), read_json(out / "energy.json")
        # the same checkpoints (labels and paths: another source or --init_seed is another path) and the same ranks
        if (old and old_energy and [(c["label"], c["path"]) for c in old["checkpoints"]] == [(e[0], str(e[1])) for e in entries]
                and old_energy.get("ranks") == spectrum.energy_ranks(ranks)):
            self.say(f"skip spectra ({out}/spectrum.json has {labels}, energy.json their ranks)")
            return
        results = []
        for label, path, model in entries:
            t = time.time()
            results.append(dict(label=label, path=str(path), model_config=model.config.to_dict(),
                                spectra=spectrum.attention_spectra(model)))
            self.say(f"spectra of {label}: {time.time() - t:.0f}s")
        spectrum.write(results, str(out))
        spectrum.write_energy(results, ranks, str(out))
        self.say(f"wrote {out}")


def fmt(x, nd=3):
    return "not run" if x is None else f"{x:.{nd}f}"


def scratch_of(target: str, rope: str, scratch_dir, seed: int):
    """The from-scratch run of a target in the table's runs (RoPE MLA: the latent-RoPE row first), or None."""
    for row in scratch_rows(target, rope):
        s = read_json(Path(scratch_dir) / f"{row}-rope_{rope}-s{seed}" / "summary.json")
        if s and s.get("final_val_loss") is not None:
            return dict(row=row, final_val_loss=s["final_val_loss"], iters=s.get("iters"), finished=s.get("finished"))
    return None


def collect(study: Study, sources: list, targets: list) -> list:
    a = study.args
    rows = []
    for src in sources:
        for target in targets:
            tdir = study.work / src["tag"] / target
            ev = read_json(tdir / "convert" / "eval.json")
            curve = val_curve(tdir / "finetune")
            ft_summary = read_json(tdir / "finetune" / "summary.json") or {}
            rows.append(dict(
                positions=src["tag"], target=target, source=src["path"],
                source_val_loss=src["summary"]["final_val_loss"], source_val_loss_reevaluated=src["val_loss_reevaluated"],
                attn_params=ev and ev["attn_params"], kv_values_per_token_per_layer=ev and ev["kv_values_per_token_per_layer"],
                converted_val_loss=ev and ev["val_loss"],
                finetuned_val_loss={str(n): curve.get(n) for n in study.lengths if n > 0},
                finetune_curve={str(k): v for k, v in sorted(curve.items())},
                finetune_finished=bool(ft_summary.get("finished")), finetune_wall_time_s=ft_summary.get("wall_time_s"),
                scratch=scratch_of(target, src["rope"], a.scratch_dir, a.scratch_seed),
                logit_rel_err=ev and ev["logit_rel_err"], attn_out_rel_err_mean=ev and ev["attn_out_rel_err_mean"],
                attn_out_rel_err_layers=ev and ev["attn_out_rel_err_layers"],
                W_rel_err_mean=ev and sum(ev["W_rel_err_layers"]) / len(ev["W_rel_err_layers"]),
                Wt_rel_err_mean=ev and sum(ev["Wt_rel_err_layers"]) / len(ev["Wt_rel_err_layers"]),
                W_rel_err_layers=ev and ev["W_rel_err_layers"], Wt_rel_err_layers=ev and ev["Wt_rel_err_layers"],
            ))
    return rows


def write_tables(study: Study, sources: list, rows: list):
    a = study.args
    out = Path(a.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    positive = [n for n in study.lengths if n > 0]
    lr = a.finetune_lr if a.finetune_lr is not None else sources[0]["cfg"].get("min_lr", 6e-5)
    setup = dict(data_dir=a.data_dir, sources={s["tag"]: dict(path=s["path"], **s["summary"],
                                                                val_loss_reevaluated=s["val_loss_reevaluated"],
                                                                dtype=s["dtype"], model_config=s["model"].config.to_dict())
                                                for s in sources},
                 finetune=dict(iters=positive, lr=lr, schedule="constant (decay_lr=False, no warmup)",
                               eval_interval=study.ft_interval, compile=a.compile,
                               optimizer="fresh AdamW state (convert.write_checkpoint)"),
                 scratch_dir=a.scratch_dir, scratch_seed=a.scratch_seed, err_windows=a.err_windows,
                 device=str(study.device), gpus=study.gpus, torch_version=torch.__version__,
                 cuda_device=torch.cuda.get_device_name(0) if study.device.type == "cuda" else "cpu",
                 val_loss="the whole val split in order (train.py eval_full_val), bf16 autocast on GPU")
    write_saved(dict(setup=setup, rows=rows), out)


def write_saved(saved: dict, out: Path) -> bool:
    """table.json, table.md (from table.json's contents alone) and finetune.png (True if drawn)."""
    write_text(out / "table.json", json.dumps(saved, indent=1) + "\n")  # atomically: --plot_only rewrites it in place
    md = table_markdown(saved)
    write_text(out / "table.md", md)
    print(md)
    try:
        plot_finetune(saved["rows"], out / "finetune.png")
        return True
    except ImportError as e:  # a GPU machine without matplotlib: --plot_only draws it from table.json later
        print(f"warning: no finetune.png ({e}); draw it later with --plot_only", file=sys.stderr)
        return False


def table_markdown(saved: dict) -> str:
    setup, rows = saved["setup"], saved["rows"]
    positive = setup["finetune"]["iters"]
    lines = [f"Trained MHA converted into other attentions; val loss on the whole val split of `{setup['data_dir']}`. "
             f"Fine-tune: constant lr {setup['finetune']['lr']:g}, fresh AdamW state. Rel. errors: W, W~ = "
             f"|T - T_conv| / |T| (mean over layers); logits and attention outputs (each layer fed the source's "
             f"residual stream, mean over layers) on the first {setup['err_windows']} val windows, float32. From "
             f"scratch: `{setup['scratch_dir']}`, seed {setup['scratch_seed']}.", ""]
    ft_cols = [f"+{n} it" for n in positive]
    for tag, s in setup["sources"].items():
        lines += [f"**{'RoPE' if tag == 'rope' else 'learned positions'}**: source `{s['path']}`, "
                  f"{s.get('iters')} iterations, final val loss {fmt(s.get('final_val_loss'), 4)} "
                  f"(re-evaluated here: {fmt(s.get('val_loss_reevaluated'), 4)}), {s.get('attn_params') or 0:,} attn params.", "",
                  "| target | attn params | KV/token/layer | converted | " + " | ".join(ft_cols) +
                  (" | " if ft_cols else "") + "from scratch | rel. err W | rel. err W~ | logit rel. err | attn-out rel. err |",
                  "| --- | ---: | ---: | ---: | " + "".join("---: | " for _ in ft_cols) + "---: | ---: | ---: | ---: | ---: |"]
        for r in rows:
            if r["positions"] != tag:
                continue
            sc = r["scratch"]
            scratch = "n/a" if r["target"] == FULL else ("not run" if sc is None else
                                                        f"{sc['final_val_loss']:.3f} ({sc['iters']} it"
                                                        f"{'' if sc['row'] == r['target'] else ', ' + sc['row']})")
            fts = ["n/a" if r["target"] == FULL else fmt(r["finetuned_val_loss"].get(str(n))) for n in positive]
            e = lambda x: "not run" if x is None else f"{x:.3g}"  # noqa: E731
            lines.append(f"| {r['target']} | {r['attn_params'] or 0:,} | {r['kv_values_per_token_per_layer'] or '-'} | "
                         f"{fmt(r['converted_val_loss'])} | " + "".join(f"{v} | " for v in fts) +
                         f"{scratch} | {e(r['W_rel_err_mean'])} | {e(r['Wt_rel_err_mean'])} | "
                         f"{e(r['logit_rel_err'])} | {e(r['attn_out_rel_err_mean'])} |")
        lines.append("")
    return "\n".join(lines)


def plot_finetune(rows: list, path: Path):
    """Val loss against fine-tune iterations (0 = converted), per positions setting; dashed: from scratch."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tags = [t for t in ("learned", "rope") if any(r["positions"] == t for r in rows)]
    fig, axes = plt.subplots(1, len(tags), figsize=(6.5 * len(tags), 4.5), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, tag in zip(axes[0], tags):
        mine = [r for r in rows if r["positions"] == tag and r["target"] != FULL]
        for j, r in enumerate(mine):
            color = colors[j % len(colors)]
            pts = dict(r["finetune_curve"])
            if r["converted_val_loss"] is not None:
                pts.setdefault("0", r["converted_val_loss"])
            if pts:
                xs = sorted(int(k) for k in pts)
                ax.plot(xs, [pts[str(x)] for x in xs], "o-", color=color, label=r["target"])
            if r["scratch"]:
                ax.axhline(r["scratch"]["final_val_loss"], color=color, linestyle="--", linewidth=0.9)
        source = next((r["source_val_loss"] for r in mine if r["source_val_loss"] is not None), None)
        if source is not None:
            ax.axhline(source, color="black", linewidth=1.2, label="MHA source")
        ax.set_title(f"MHA ({'RoPE' if tag == 'rope' else 'learned positions'}) converted; dashed: from scratch")
        ax.set_xlabel("fine-tune iterations")
        ax.set_ylabel("val loss (whole split)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_only(results_dir: str, spectra_dir: str, scratch_dir: str = ""):
    """Redraw finetune.png and the spectra figures from table.json and spectrum.json (a GPU machine
    without matplotlib leaves only those); with scratch_dir, first refresh the from-scratch column from
    the runs there (table runs that finished after the study) and rewrite table.json and table.md."""
    saved = read_json(Path(results_dir) / "table.json")
    if saved:
        if scratch_dir:
            setup = saved["setup"]
            setup["scratch_dir"] = scratch_dir
            for r in saved["rows"]:
                rope = "on" if r["positions"] == "rope" else "off"
                r["scratch"] = scratch_of(r["target"], rope, scratch_dir, setup["scratch_seed"])
            drawn = write_saved(saved, Path(results_dir))
            print(f"wrote {results_dir}/table.json, table.md{', finetune.png' if drawn else ''}")
        else:
            plot_finetune(saved["rows"], Path(results_dir) / "finetune.png")
            print(f"wrote {results_dir}/finetune.png")
    if spectra_dir and (Path(spectra_dir) / "spectrum.json").exists():
        print("wrote " + ", ".join(spectrum.plot(spectrum.load_results(str(Path(spectra_dir) / "spectrum.json")), spectra_dir)))


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if "--plot_only" in argv:  # here, after the GPU run: only the figures
        ap = argparse.ArgumentParser()
        ap.add_argument("--plot_only", action="store_true")
        ap.add_argument("--results_dir", default="results/convert")
        ap.add_argument("--spectra_dir", default="results/spectra")
        ap.add_argument("--scratch_dir", default="", help="refresh the from-scratch column from these runs first")
        a = ap.parse_args(argv)
        return plot_only(a.results_dir, a.spectra_dir, a.scratch_dir)
    # what it does and the usage example after it (the first paragraph alone ended mid-sentence or at a colon)
    ap = argparse.ArgumentParser(description="\n\n".join(__doc__.strip().split("\n\n")[:2]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mha", nargs="+", required=True, help="trained MHA run folders (with ckpt.pt), learned and/or RoPE")
    ap.add_argument("--tucker", help="a trained Tucker run folder, for the spectra")
    ap.add_argument("--data_dir", required=True, help="folder with train.bin and val.bin")
    ap.add_argument("--work_dir", required=True, help="converted checkpoints and fine-tune runs (outside the repository)")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), help="row ids: tucker_R1_R2_R3, gqaN, mla_sharedN")
    ap.add_argument("--full_rank_check", action=argparse.BooleanOptionalAction, default=True,
                    help=f"also evaluate {FULL} (ranks nH, d, d; no fine-tune)")
    ap.add_argument("--finetune_iters", nargs="+", type=int, default=[0, 100, 300],
                    help="val loss after these many fine-tune iterations (one run of the largest, evaluated every gcd)")
    ap.add_argument("--finetune_lr", type=float, help="constant fine-tune learning rate (default: the source run's min_lr)")
    ap.add_argument("--finetune_eval_iters", type=int, default=40, help="train-loss batches per fine-tune evaluation")
    ap.add_argument("--batch_size", type=int, help="fine-tune batch (default: the source run's)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False, help="torch.compile the fine-tunes")
    ap.add_argument("--scratch_dir", default="results/enwiki/runs", help="from-scratch runs: <row>-rope_<off|on>-s<seed>/summary.json")
    ap.add_argument("--scratch_seed", type=int, default=1337)
    ap.add_argument("--results_dir", default="results/convert")
    ap.add_argument("--spectra_dir", default="results/spectra", help="'' to skip the spectra")
    ap.add_argument("--init_seed", type=int, default=1337, help="seed of the random initialization in the spectra")
    ap.add_argument("--err_windows", type=int, default=4, help="val windows for the logit / attention-output errors")
    ap.add_argument("--eval_batch_size", type=int, default=16, help="windows per batch of the whole-split evaluations here")
    ap.add_argument("--device", default="", help="this process's device (default cuda if available)")
    ap.add_argument("--dtype", default="", help="evaluation/fine-tune dtype (default: the source run's on GPU, float32 on CPU)")
    ap.add_argument("--gpus", default="", help="physical GPU ids for the fine-tunes, one run per GPU at a time (default: one at a time on --device)")
    ap.add_argument("--time_budget", type=float, default=0, help="no conversion or fine-tune starts after this many seconds (0: none)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads of this process (0: torch's default, less 2 per GPU of --gpus)")
    ap.add_argument("--allow_unfinished", action="store_true", help="convert a source whose run did not finish")
    ap.add_argument("--inprocess", action="store_true", help="fine-tunes in this process, one after another (CPU smoke tests)")
    args = ap.parse_args(argv)
    study = Study(args)
    if args.threads or study.gpus:  # leave cores to the fine-tune processes (eager training is launch-bound)
        torch.set_num_threads(args.threads or max(2, (os.cpu_count() or 4) - 2 * len(study.gpus)))
    targets = list(args.targets) + ([FULL] if args.full_rank_check and FULL not in args.targets else [])
    study.work.mkdir(parents=True, exist_ok=True)
    sources = []
    for path in args.mha:
        if not (Path(path) / "ckpt.pt").exists() and not Path(path).is_file():
            print(f"warning: no checkpoint in {path}: skipped", file=sys.stderr)
            continue
        try:  # an unknown target, or one that does not fit the source's sizes: before any evaluation or conversion
            src = study.load_source(path, targets)
        except ValueError as e:
            sys.exit(f"error: {e}")
        if src is not None:
            sources.append(src)
    if not sources:
        sys.exit("error: no MHA checkpoint to convert")
    if len({s["tag"] for s in sources}) != len(sources):
        sys.exit("error: give at most one MHA source per positions setting (learned, RoPE)")

    finetune = study.ft_iters > 0
    for src in sources:  # conversions here (CPU, float64), fine-tunes on the GPUs as each becomes ready
        for target in targets:
            ev = study.convert_one(src, target, finetune and target != FULL)
            if ev is not None and finetune and target != FULL:
                if args.inprocess:  # train.main in this thread (it redirects this process's stdout)
                    study.finetune(src, target)
                else:
                    study.futures.append(study.pool.submit(study.finetune, src, target))
    if args.spectra_dir:
        ranks = sorted({target_kwargs(t, sources[0]["model"].config)["ranks"] for t in targets
                        if t.startswith("tucker") and t != FULL})
        study.spectra(sources, [list(r) for r in ranks])
    for f in study.futures:
        f.result()
    study.pool.shutdown()
    rows = collect(study, sources, targets)
    write_tables(study, sources, rows)
    print(f"wrote {args.results_dir}/table.md, table.json, finetune.png in {study.elapsed():.0f}s")
    return rows


if __name__ == "__main__":
    main()

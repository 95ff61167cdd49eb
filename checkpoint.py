"""
The ckpt.pt layout, written atomically and read back with one-line errors.

A checkpoint is one dict saved with torch.save (read back with weights_only=True):

    model           the GPT's state_dict (train.py saves float32 weights: with master_weights, the masters)
    model_config    GPTConfig.to_dict(): the model is rebuilt from this alone
    optimizer       AdamW's state_dict layout (MasterAdamW writes the same; its param groups keep weight decay and
                    betas; a resumed run keeps its own fused/foreach choice: train.load_optimizer_state)
    config          the run's resolved config (training and model keys)
    iter_num        iterations done
    best_val_loss   best val loss so far (inf before any evaluation)
    best_iter       iteration of best_val_loss (-1: never evaluated, e.g. a converted model)
    bad_evals       evaluations since the best one (early stopping)
    val_loss        val loss of the evaluation at iter_num (a checkpoint is written right after one)
    sampler_state   state of the training batch generator (None: seed it from the resuming run)
    rng_states      one {"torch": CPU RNG state, "cuda": CUDA RNG state or None, "mps": an Apple GPU's or None}
                    per DDP rank, so dropout continues exactly on every rank
    git_commit      the code that wrote it

Only model and model_config are needed to sample; --init_from=resume needs the TRAINING_KEYS.

    from checkpoint import load_checkpoint, save_checkpoint
    model, ckpt = load_checkpoint("out-shakespeare-tucker")     # a folder holding ckpt.pt, or a file
"""
import json
import math
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Optional

import torch

from atomic_files import (atomic_write, pid_alive, remove_stale_temps,  # noqa: F401 (re-exported: train.py and
                          write_json, write_text)  # the scripts import them from here)
from model import GPT, GPTConfig

CKPT_NAME = "ckpt.pt"
MODEL_KEYS = ("model", "model_config")
TRAINING_KEYS = MODEL_KEYS + ("optimizer", "iter_num", "best_val_loss", "best_iter")


def make_checkpoint(model, optimizer, config: dict, iter_num: int = 0, best_val_loss: float = math.inf,
                    best_iter: int = -1, bad_evals: int = 0, val_loss=None, sampler_state=None, rng_states=None,
                    model_state=None, optimizer_state=None, **extra) -> dict:
    """The checkpoint dict of the layout above (extra keys, e.g. a converter's notes, are kept as given).
    model_state / optimizer_state replace model.state_dict() / optimizer.state_dict() (train.py's FSDP
    path passes the full, gathered ones, in the same layout)."""
    return {"model": model.state_dict() if model_state is None else model_state, "model_config": model.config.to_dict(),
            "optimizer": optimizer.state_dict() if optimizer_state is None else optimizer_state,
            "config": config, "iter_num": iter_num, "best_val_loss": best_val_loss, "best_iter": best_iter,
            "bad_evals": bad_evals, "val_loss": val_loss, "sampler_state": sampler_state, "rng_states": rng_states,
            "git_commit": git_commit(), **extra}


def rng_state(device) -> dict:
    """This process's RNG states (dropout), as one entry of the checkpoint's rng_states: the CPU's, and the GPU's
    whose generator draws the dropout masks there (CUDA's, or an Apple GPU's, 'mps')."""
    kind = torch.device(device).type
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if kind == "cuda" else None,
            "mps": torch.mps.get_rng_state() if kind == "mps" else None}


def saved_rng_state(checkpoint: dict, rank: int):
    """The RNG states `rank` saved, or None when the checkpoint has none for it (another world size)."""
    states = checkpoint.get("rng_states")
    if states is None and checkpoint.get("torch_rng_state") is not None:  # older layout: rank 0 only
        states = [{"torch": checkpoint["torch_rng_state"], "cuda": checkpoint.get("cuda_rng_state")}]
    return states[rank] if states is not None and rank < len(states) else None


# ----------------------------------------------------------------------------------------
# Writing: through atomic_files.atomic_write (temp file in the same folder, fsync, rename)


def save_checkpoint(path: str, checkpoint: dict) -> None:
    """torch.save `checkpoint` to `path` atomically (see atomic_write)."""
    atomic_write(path, lambda tmp: torch.save(checkpoint, tmp))


def save_figure(fig, path, **kwargs) -> None:
    """fig.savefig(path) atomically (the temp name hides the extension, so the format is given from path's), then
    the figure closed: every caller is done with it, and pyplot would otherwise keep it alive."""
    import matplotlib.pyplot as plt  # only the plotting paths import matplotlib
    fmt = os.path.splitext(os.fspath(path))[1].lstrip(".") or "png"  # None: matplotlib reads the temp name's suffix
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, **kwargs))
    finally:
        plt.close(fig)


def read_json_args(tool: str, paths, what: str = "JSON object") -> Optional[list]:
    """A plotting script's JSON inputs (`what` they should be), each a JSON object; None after one line naming every
    path that is missing or holds something else (the caller exits 1)."""
    runs = [read_json(path) for path in paths]
    bad = [str(path) for path, run in zip(paths, runs) if not isinstance(run, dict)]
    if bad:
        print(f"{tool}: not a {what} (missing, unreadable or not a JSON object): {', '.join(bad)}", file=sys.stderr)
        return None
    return runs


def figure_cli(tool: str, draw, path) -> int:
    """A plotting script's last step: draw(path) (False without matplotlib), then where the figure went or why there
    is none; the exit code. A path without an extension gets .png; a missing folder is made; a folder given as the
    path is one line (exit 2)."""
    path = Path(path)
    if path.is_dir():
        print(f"{tool}: --out {path} is a folder: give the figure's file name (e.g. {path / 'figure.png'})",
              file=sys.stderr)
        return 2
    if not path.suffix:
        path = path.with_suffix(".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    if not draw(path):
        print(f"{tool}: matplotlib is not installed: no figure", file=sys.stderr)
        return 1
    print(f"{tool}: {path}")
    return 0


def read_json(path):
    """A JSON file's contents, or None when it is missing or not (yet) valid JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_log(run_dir) -> list:
    """A run's log.jsonl records in order; a line cut by a kill (or still being written) is left out."""
    records = []
    try:
        with open(os.path.join(run_dir, "log.jsonl")) as f:
            lines = f.read().splitlines()
    except OSError:
        return records
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            pass
    return records


def log_losses(run_dir) -> tuple:
    """A run's logged training losses {iter: loss} and evaluations {iter: val_loss}, from log.jsonl."""
    records = read_log(run_dir)
    return ({r["iter"]: r["loss"] for r in records if "loss" in r},
            {r["iter"]: r["val_loss"] for r in records if "val_loss" in r})


def git_commit() -> str:
    """HEAD of the repository holding this file, '-dirty' if tracked files changed; 'unknown' without git."""
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# ----------------------------------------------------------------------------------------
# Reading: every failure is one line naming the file


def checkpoint_path(path: str, ckpt: str = CKPT_NAME) -> str:
    """`path` itself, or path/ckpt when `path` is a folder."""
    path = os.fspath(path)
    return os.path.join(path, ckpt) if os.path.isdir(path) else path


class NoCheckpointWritten(FileNotFoundError):
    """No ckpt.pt in a run folder whose run was trained with save_checkpoint=False: the message says how to get one."""


def read_checkpoint(path: str, keys=MODEL_KEYS) -> dict:
    """The checkpoint dict at `path` (a file, or a folder holding ckpt.pt), on the CPU. Raises
    FileNotFoundError (no file) or ValueError (empty, truncated, not a checkpoint, missing one of
    `keys`, or an invalid model_config), each one line naming the file."""
    path = checkpoint_path(path)
    if not os.path.isfile(path):
        run = read_json(os.path.join(os.path.dirname(path), "config.json"))  # the run's resolved config
        if isinstance(run, dict) and run.get("save_checkpoint") is False:  # a sweep's runs, by default
            raise NoCheckpointWritten(f"no checkpoint at {path} (the run in {os.path.dirname(path) or '.'} was trained "
                                      "with save_checkpoint=False and wrote none: train it again with "
                                      "--save_checkpoint=True, in a sweep --save-checkpoints)")
        raise FileNotFoundError(f"no checkpoint at {path}")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty: not a checkpoint (an interrupted copy?)")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, foreign pickle, text, ...: torch raises many kinds
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        reason = f"{type(e).__name__}: {text}" if text else type(e).__name__  # a bare KeyError says only '101'
        raise ValueError(f"{path} is not a readable checkpoint (truncated or not written by train.py): "
                         f"{reason[:200]}") from None
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{path} is not a checkpoint: it holds a {type(checkpoint).__name__}, not a dict")
    missing = [k for k in keys if k not in checkpoint]
    if missing:
        raise ValueError(f"{path} is not a train.py checkpoint: missing {', '.join(missing)}")
    if "model" in keys and not isinstance(checkpoint["model"], dict):
        raise ValueError(f"{path} is not a train.py checkpoint: its 'model' is a {type(checkpoint['model']).__name__}, "
                         "not a dict of weights")
    try:
        GPTConfig.from_dict(checkpoint["model_config"])
    except (TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path} has an invalid model_config: {e}") from None
    unknown = sorted(set(checkpoint["model_config"]) - {f.name for f in fields(GPTConfig)})
    if unknown:  # from_dict would drop them: the model rebuilt would not be the one saved
        raise ValueError(f"{path}'s model_config has keys this model.py does not know: {', '.join(map(str, unknown))} "
                         "(a checkpoint of another version of the repository?)")
    return checkpoint


def model_from_checkpoint(checkpoint: dict, path: str = "checkpoint") -> GPT:
    """The GPT rebuilt from checkpoint's own model_config, weights loaded, in the dtype it was saved in
    (torch.compile's '_orig_mod.' prefix tolerated), in eval mode, on the CPU."""
    state = {k.removeprefix("_orig_mod."): v for k, v in checkpoint["model"].items()}
    model = GPT(GPTConfig.from_dict(checkpoint["model_config"]))
    if state:
        model = model.to(next(iter(state.values())).dtype)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:  # torch's first line is only "Error(s) in loading state_dict for GPT:"; the what next
        detail = " ".join(line.strip() for line in str(e).splitlines()[1:] if line.strip())[:400]
        raise ValueError(f"{path}: the weights do not match its model_config: {detail or str(e).strip()}") from None
    return model.eval()


def load_checkpoint(path: str):
    """(model, checkpoint dict) from a ckpt.pt path or an out_dir holding one (see read_checkpoint)."""
    checkpoint = read_checkpoint(path)
    return model_from_checkpoint(checkpoint, checkpoint_path(path)), checkpoint


def load_model(out_dir: str, ckpt: str = CKPT_NAME, device="cpu") -> GPT:
    """The model of out_dir/ckpt on `device`, or of out_dir itself where it is a checkpoint file (errors as
    read_checkpoint)."""
    path = os.fspath(out_dir) if os.path.isfile(out_dir) else os.path.join(out_dir, ckpt)
    return model_from_checkpoint(read_checkpoint(path), path).to(device)

"""
Token files and how a split's loss is measured (train.py, scripts/convert.py, the conversion study).

A token file (data/<name>/{train,val}.bin, written by data/<name>/prepare.py) is a flat array of
uint16 GPT-2 token ids. `check_token_file` validates one once at startup; `Batches` draws
windows of block_size + 1 tokens from it; `split_loss` is the token-mean loss of a model on it.

    from evaluate import split_loss
    loss = split_loss(model, "data/shakespeare/val.bin", block_size=256, batch_size=16, n_batches=0,
                      full=True, device=torch.device("cpu"))
"""
import json
import math
import os
from contextlib import nullcontext
from time import monotonic
from typing import Optional

import numpy as np
import torch

from configurator import float64_device

TOKEN_DTYPE = np.uint16
CHUNK = 1 << 24  # tokens per read when scanning a file for its largest id (32 MB)
PROGRESS_EVERY_S = 30.0  # split_loss's default interval between two progress reports


def min_tokens(block_size: int) -> int:
    """Tokens a file needs for Batches: one window of block_size + 1, and room to draw an offset."""
    return block_size + 2


def check_token_file(path: str, vocab_size: int, block_size: int) -> int:
    """Number of tokens in `path`, after checking that it is a whole number of uint16 tokens, is long
    enough for windows of block_size + 1 tokens, and that every id is < vocab_size (the largest id is
    found in one pass over chunks of the memmap). Raises FileNotFoundError / ValueError naming the file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found")
    meta = os.path.join(os.path.dirname(path), "meta.json")  # the prepare's record, where it wrote one
    recorded = None  # the tokens meta.json records for this file (`<name>_tokens`, e.g. train_tokens)
    if os.path.isfile(meta):
        try:
            with open(meta) as f:
                record = json.load(f)
            dtype = record.get("dtype")
            recorded = record.get(os.path.basename(path).rsplit(".", 1)[0] + "_tokens")
        except (OSError, ValueError, AttributeError):
            dtype = None  # unreadable or not ours: the file's own checks below still hold
        if dtype is not None and dtype != np.dtype(TOKEN_DTYPE).name:
            raise ValueError(f"{meta} says its token files hold {dtype}, but training reads "
                             f"{np.dtype(TOKEN_DTYPE).name} ids: re-tokenize into uint16 (ids < 65,536)")
    size = os.path.getsize(path)
    itemsize = np.dtype(TOKEN_DTYPE).itemsize
    if isinstance(recorded, int) and size != recorded * itemsize:  # prepares write meta.json before the renames
        raise ValueError(f"{path} holds {size / itemsize:,.0f} tokens but {meta} records {recorded:,}: a prepare was "
                         f"interrupted while it replaced the files (or they come from different prepares): re-run "
                         f"the dataset's prepare.py")
    if size == 0:
        raise ValueError(f"{path} is empty: re-run the dataset's prepare.py")
    if size % itemsize:
        raise ValueError(f"{path} has {size} bytes, not a whole number of {itemsize}-byte tokens "
                         f"(truncated, or not a uint16 token file): re-run the dataset's prepare.py")
    n = size // itemsize
    if n < min_tokens(block_size):
        raise ValueError(f"{path} has {n:,} tokens, fewer than block_size + 2 = {min_tokens(block_size):,}: "
                         f"use a smaller block_size or more data")
    data = np.memmap(path, dtype=TOKEN_DTYPE, mode="r")
    top = max(int(data[i:i + CHUNK].max()) for i in range(0, n, CHUNK))
    if top >= vocab_size:
        first = next(i + int(np.argmax(data[i:i + CHUNK] >= vocab_size)) for i in range(0, n, CHUNK)
                     if data[i:i + CHUNK].max() >= vocab_size)
        raise ValueError(f"{path} holds token id {top} (first out-of-range id at position {first:,}), but the model's "
                         f"vocab_size is {vocab_size}: the file was made with another tokenizer, or vocab_size is wrong")
    return n


class Batches:
    """Random windows of block_size + 1 tokens from a uint16 token file.

    One generator, seeded identically on every rank, draws the offsets of the whole global
    batch (all micro-steps of all ranks) each iteration; rank r takes its own micro-steps. So the
    data seen per iteration is the same for 1 or K processes, and the generator state in the
    checkpoint makes a resumed run draw exactly the batches it would have drawn."""

    def __init__(self, path: str, block_size: int, batch_size: int, seed: int):
        self.path, self.block_size, self.batch_size = path, block_size, batch_size
        self.n_tokens = os.path.getsize(path) // np.dtype(TOKEN_DTYPE).itemsize
        if self.n_tokens < min_tokens(block_size):
            raise ValueError(f"{path} has {self.n_tokens:,} tokens, fewer than block_size + 2 = {min_tokens(block_size)}")
        self.gen = torch.Generator().manual_seed(seed)

    def draw(self, n_micro: int) -> torch.Tensor:
        """(n_micro, batch_size) window offsets, uniform over 0 .. n - block_size - 2. The last full window (offset
        n - block_size - 1, nanoGPT's bound) is never drawn: kept so, as changing the bound would change every
        seed's batches and so the recorded runs' losses; over a train split of millions of tokens it is one window."""
        return torch.randint(self.n_tokens - self.block_size - 1, (n_micro, self.batch_size), generator=self.gen)

    def get(self, offsets: torch.Tensor, device):
        """Inputs x and targets y (x shifted by one), (len(offsets), block_size) int64 on `device`."""
        # re-open the memmap each time: a long-lived memmap grows resident memory (nanoGPT's note)
        data = np.memmap(self.path, dtype=TOKEN_DTYPE, mode="r")
        x = torch.stack([torch.from_numpy(data[i:i + self.block_size].astype(np.int64)) for i in offsets.tolist()])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + self.block_size].astype(np.int64)) for i in offsets.tolist()])
        if device.type == "cuda":
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x.to(device), y.to(device)


@torch.no_grad()
def split_loss(model, path: str, block_size: int, batch_size: int, n_batches: int, full: bool, device,
               autocast=nullcontext(), seed: int = 0, rank: int = 0, world: int = 1, even: bool = False,
               progress=None, progress_every_s: Optional[float] = None) -> float:
    """Token-mean loss of `model` on a token file: every non-overlapping block_size window in order
    (full=True, deterministic; the targets after the last whole window, fewer than block_size + 1 of
    them, are not scored: 218 of Shakespeare's 36,059 val tokens at block_size 256, every run alike),
    or n_batches random batches from a generator seeded with `seed`
    (the same batches every call). Under DDP each rank takes every world-th batch and the sums
    are reduced, so every rank returns the same number. even=True (FSDP, where every forward
    all-gathers weights, a collective): every rank runs the same number of forwards; a rank with
    no batch left reruns the first one and drops its result (the same batches, the same number).
    progress: None, or a callable(done, total) called after a batch once progress_every_s seconds
    (default PROGRESS_EVERY_S) have passed since the start or the last call, so that a long
    evaluation (the whole split at a small block_size) is not silent; it reads the clock only,
    never the device (no sync)."""
    batches = Batches(path, block_size, batch_size, seed=seed)
    if full:
        chunks = list(torch.arange(0, batches.n_tokens - block_size, block_size).split(batch_size))
    else:
        chunks = list(batches.draw(n_batches))
    if not chunks:
        raise ValueError(f"no batches to evaluate {path} on (n_batches={n_batches})")
    was_training = model.training
    model.eval()
    at = float64_device(device)  # the device, or the CPU for MPS (no float64 there)
    total = torch.zeros(2, device=at, dtype=torch.float64)  # (sum of token losses, tokens)
    stop = rank + math.ceil(len(chunks) / world) * world if even else len(chunks)
    every = PROGRESS_EVERY_S if progress_every_s is None else progress_every_s
    said = monotonic()
    for j in range(rank, stop, world):
        X, Y = batches.get(chunks[j if j < len(chunks) else 0], device)
        with autocast:
            _, loss = model(X, Y)
        if j < len(chunks):
            total[0] += loss.to(at, torch.float64) * Y.numel()
            total[1] += Y.numel()
        if progress is not None and monotonic() - said >= every:
            progress(min(j + 1, len(chunks)), len(chunks))
            said = monotonic()
    if world > 1:
        torch.distributed.all_reduce(total)
    model.train(was_training)
    return (total[0] / total[1]).item()


if __name__ == "__main__":  # a library: say where the command lines are rather than accept one and do nothing
    import sys
    print("evaluate.py is a library (token files, a split's loss: see its docstring). A checkpoint's val loss: "
          "python train.py --init_from=resume --eval_only=True --out_dir=DIR; the zero-shot tasks: python -m "
          "scripts.eval_zeroshot --help", file=sys.stderr)
    sys.exit(2)

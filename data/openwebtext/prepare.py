"""
Prepare OpenWebText for GPT-2 BPE training, as nanoGPT's data/openwebtext does.

    python -m data.openwebtext.prepare                       # HF `openwebtext` (needs `datasets`)
    python -m data.openwebtext.prepare --files a.txt b.jsonl --out_dir out-data --tokenizer gpt2.tiktoken

Default source: HF datasets' `openwebtext` (8,013,769 documents), split with
train_test_split(test_size=0.0005, seed=2357, shuffle=True) and 'test' renamed 'val',
exactly as nanoGPT (~9B train tokens, ~4M val tokens). With --files the documents come
from local files instead (.txt: one document per file; .jsonl: one {"text": ...} per line;
.json: a list of {"text": ...}) and a seeded val split is drawn over the documents.

Every document is encoded with encode_ordinary and followed by <|endoftext|> (50256).
Tokenization runs in a multiprocessing pool; tokens are streamed to disk in document
order, so memory stays bounded whatever the dataset size. Outputs in --out_dir:
train.bin, val.bin (flat uint16 tokens, read with np.memmap) and meta.json. A re-run with the
inputs meta.json records (the same files unchanged, fraction and seed) finds the output complete
and does nothing (--force tokenizes again); an interrupted one (Ctrl-C, kill) leaves the earlier
output as it was.
"""
import argparse
import collections
import contextlib
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

if not __package__:  # run as a file, the repository's tokenizer.py is not importable
    sys.exit("run from the repository root as a module: python -m data.openwebtext.prepare ...")
from atomic_files import (check_num_proc, interrupt_on_sigterm, remove_stale_outputs, replace_together,  # noqa: E402
                          terminate_pool, worker_pool)
from tokenizer import EOT, VOCAB_SIZE, encode_documents, get_gpt2_encoding, init_worker  # noqa: E402

HERE = Path(__file__).resolve().parent
HF_DATASET = "openwebtext"  # nanoGPT's name; newer hubs also host it as "Skylion007/openwebtext"
DEFAULT_NUM_PROC = min(8, os.cpu_count() or 1)  # nanoGPT uses 8 workers

# -----------------------------------------------------------------------------
# progress (the pool workers are tokenizer.init_worker / encode_documents)


class _Progress:
    """Tiny progress line on stderr: documents, documents/s, tokens (no tqdm dependency)."""

    def __init__(self, desc, total=None, every=0.5):
        self.desc, self.total, self.t0 = desc, total, time.time()
        self.tty = sys.stderr.isatty()
        self.every = every if self.tty else 10.0  # don't flood log files
        self.last = self.t0  # first line after `every` seconds; close() always prints the final one
        self.docs = self.tokens = 0

    def update(self, docs, tokens):
        self.docs += docs
        self.tokens += tokens
        now = time.time()
        if now - self.last >= self.every:
            self.last = now
            self._print(end="\r" if self.tty else "\n")

    def _print(self, end):
        dt = max(time.time() - self.t0, 1e-9)
        frac = f" {100 * self.docs / self.total:5.1f}%" if self.total else ""
        print(f"{self.desc}:{frac} {self.docs:,} docs ({self.docs / dt:,.0f} docs/s), "
              f"{self.tokens:,} tokens, {dt:.0f}s", end=end, file=sys.stderr, flush=True)

    def close(self):
        self._print(end="\n")


def write_tokens(docs, tmps, pool, total=None, chunk_docs=256, max_inflight=32):
    """Tokenize the `docs` iterable of (split, document) pairs into the flat uint16 files tmps[split] (temp names:
    prepare renames every split into place together at the end), each split's documents in the order they come;
    return {split: (n_tokens, n_docs)}. A failure or an interrupt removes every file of `tmps`.

    One pass over the documents for all splits (not one a split: local files were read and parsed again for val's
    few documents): each split gathers its own chunks of `chunk_docs` documents, and chunks are written in the order
    they were submitted, so a split's file holds its documents in order, whatever the chunking. At most
    `max_inflight` chunks are submitted but not yet written (and one gathering per split): unlike Pool.imap, whose
    result queue grows without bound when the writer falls behind, this keeps memory at O(max_inflight * chunk) for
    any dataset size.
    """
    prog = _Progress("tokenizing", total)
    counts = {split: [0, 0] for split in tmps}  # tokens, documents
    try:
        with contextlib.ExitStack() as stack:
            files = {split: stack.enter_context(open(tmp, "wb")) for split, tmp in tmps.items()}

            def drain(split, res, ndocs):
                arr = res.get() if pool is not None else res
                # a Python write, as enwiki's: a SIGTERM (KeyboardInterrupt) inside numpy's tofile came out as a
                # TypeError from its fallback, a traceback instead of the interrupted run's one line
                files[split].write(arr.tobytes())
                counts[split][0] += len(arr)
                counts[split][1] += ndocs
                prog.update(ndocs, len(arr))

            pending = collections.deque()  # (split, AsyncResult, n_docs), in submission order

            def submit(split, chunk):
                if pool is None:  # num_proc=1: tokenize in-process (easy to debug)
                    drain(split, encode_documents(chunk), len(chunk))
                    return
                pending.append((split, pool.apply_async(encode_documents, (chunk,)), len(chunk)))
                if len(pending) >= max_inflight:
                    drain(*pending.popleft())

            chunks = {split: [] for split in tmps}
            for split, doc in docs:
                chunks[split].append(doc)
                if len(chunks[split]) >= chunk_docs:
                    submit(split, chunks[split])
                    chunks[split] = []
            for split, chunk in chunks.items():
                if chunk:
                    submit(split, chunk)
            while pending:
                drain(*pending.popleft())
    except BaseException:
        for tmp in tmps.values():
            Path(tmp).unlink(missing_ok=True)
        raise
    prog.close()
    return {split: tuple(c) for split, c in counts.items()}


# -----------------------------------------------------------------------------
# document sources


def iter_local_documents(files):
    """Yield documents from local files: .txt (whole file), .jsonl (line["text"]), .json (list). A file that is
    not UTF-8, or a line or file that is not JSON, is a ValueError naming the file (and the line)."""
    for fn in files:
        fn = Path(fn)
        try:
            yield from _file_documents(fn)
        except UnicodeDecodeError as e:
            raise ValueError(f"{fn}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _file_documents(fn: Path):
    if fn.suffix == ".txt":  # the bytes as they are: read_text's newline translation turned \r\n (and \r) into \n
        yield fn.read_bytes().decode("utf-8")
    elif fn.suffix == ".jsonl":
        with open(fn, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{fn}:{lineno}: not a JSON object ({e.msg} at column {e.colno})") from None
                    yield _text_field(rec, f"{fn}:{lineno}")
    elif fn.suffix == ".json":
        with open(fn, encoding="utf-8") as f:
            try:
                records = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{fn}: not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
        if not isinstance(records, list):
            raise ValueError(f"{fn}: expected a JSON list of {{'text': ...}} objects")
        for i, rec in enumerate(records):
            yield _text_field(rec, f"{fn}[{i}]")
    else:
        raise ValueError(f"{fn}: unsupported file type {fn.suffix!r} (use .txt, .jsonl or .json)")


def _text_field(rec, where):
    if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
        raise ValueError(f"{where}: expected an object with a string 'text' field")
    return rec["text"]


def split_mask(n_docs, val_fraction, seed):
    """Boolean mask of val documents: ceil(n * val_fraction) of them (as HF's train_test_split),
    at least 1 and at most n-1 when there are >= 2 documents, chosen with a seeded RNG."""
    if n_docs < 2:
        return np.zeros(n_docs, dtype=bool)
    n_val = min(max(1, math.ceil(n_docs * val_fraction)), n_docs - 1)
    rng = np.random.default_rng(seed)
    mask = np.zeros(n_docs, dtype=bool)
    mask[rng.choice(n_docs, size=n_val, replace=False)] = True
    return mask


def _assign_splits(documents, is_val):
    """(split, document) pairs: the i-th document goes to val where is_val[i] (the counting pass's mask). More
    documents than the mask counted (a file grew since that pass) is an error: zip alone dropped them silently.
    Fewer, prepare's check of the documents written refuses."""
    documents = iter(documents)
    for v, d in zip(is_val, documents):  # the mask first: zip stops at its end without taking another document
        yield ("val" if v else "train"), d
    if next(documents, None) is not None:
        raise RuntimeError("--files changed during the prepare (more documents than its counting pass found): "
                           "run it again")


def _hf_documents(dset, batch_size=1000):
    # batched iteration is much faster than row-by-row access on an Arrow-backed dataset
    for batch in dset.iter(batch_size=batch_size):
        yield from batch["text"]


# -----------------------------------------------------------------------------


def _inputs(files, val_fraction, seed) -> dict:
    """What decides a prepare's output: the sources (a local file by path, size and modification time), the split's
    fraction and seed. A re-run with the same inputs finds them in meta.json and does nothing."""
    if files:
        sources = [dict(path=str(Path(f).resolve()), bytes=Path(f).stat().st_size, mtime_ns=Path(f).stat().st_mtime_ns)
                   for f in files]
    else:
        sources = [f"hf:{HF_DATASET}"]
    return dict(sources=sources, val_fraction=val_fraction, seed=seed, tokenizer="gpt2", dtype="uint16")


def already_prepared(out_dir: Path, inputs: dict):
    """The meta.json of a complete earlier prepare from the same inputs (its train.bin and val.bin of the lengths it
    records), else None."""
    try:
        meta = json.loads((out_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("inputs") != inputs:
        return None
    for split in ("train", "val"):
        path = out_dir / f"{split}.bin"
        if not path.is_file() or path.stat().st_size != 2 * meta.get(f"{split}_tokens", -1):
            return None
    return meta


def prepare(out_dir=HERE, files=None, num_proc=DEFAULT_NUM_PROC, val_fraction=0.0005, seed=2357,
            ranks_file=None, chunk_docs=256, force=False) -> dict:
    """Tokenize OpenWebText (or local `files`) into out_dir/{train,val}.bin; return the meta dict. A complete
    earlier output of the same inputs (already_prepared) is kept as it is, unless `force`."""
    check_num_proc(num_proc)
    if not 0 < val_fraction < 1:  # also refuses nan
        raise ValueError(f"--val_fraction={val_fraction}: the fraction of documents held out for val, between 0 and 1 "
                         f"(exclusive)")
    if seed < 0:  # numpy's generators take no negative seed: its bare "expected non-negative integer" came only after
        # the counting pass over every file (or HF's whole download)
        raise ValueError(f"--seed={seed}: the seed of the train/val split, a non-negative integer")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_outputs(out_dir)  # temp files of an earlier prepare that was killed
    for f in files or ():
        if Path(f).is_dir():
            raise FileNotFoundError(f"--files: {f} is a folder: give its files (e.g. {Path(f) / '*.jsonl'})")
        if not Path(f).is_file():
            raise FileNotFoundError(f"--files: {f} not found")
    if files:  # a file named twice (overlapping globs) would put its documents in both splits: read once
        unique = list(dict.fromkeys(str(Path(f).resolve()) for f in files))
        if len(unique) < len(files):
            print(f"note: --files names {len(files) - len(unique)} file(s) more than once: each is read once")
        files = unique
    inputs = _inputs(files, val_fraction, seed)
    done = None if force else already_prepared(out_dir, inputs)
    if done is not None:
        print(f"{out_dir}: already prepared from these inputs (train {done['train_tokens']:,} tokens, val "
              f"{done['val_tokens']:,}): nothing to do (--force to tokenize again)")
        return done
    get_gpt2_encoding(ranks_file)  # fail fast (missing ranks file) before any heavy work

    if files:
        # local documents: a cheap counting pass first (it also finds a file that is not UTF-8 or JSON before any
        # tokenizing), so the split is fixed before the one tokenizing pass, which streams the files again and
        # sends each document to its split. (One pass in all cannot be: which documents are val depends on how
        # many there are, split_mask's draw of ceil(n * val_fraction) of n.)
        files = [str(Path(f).resolve()) for f in files]
        n_docs = sum(1 for _ in iter_local_documents(files))
        if n_docs < 2:  # a split without a document is a file train.py refuses: say so now
            raise ValueError(f"--files hold {n_docs} document(s): a train and a val split need at least 2")
        is_val = split_mask(n_docs, val_fraction, seed)
        docs = _assign_splits(iter_local_documents(files), is_val)
        totals = {"train": int((~is_val).sum()), "val": int(is_val.sum())}  # documents of each split
        sources = files
    else:
        try:
            from datasets import load_dataset  # lazy: only this path needs HF datasets
        except ImportError:
            raise RuntimeError("the Hugging Face download needs `pip install datasets`; or give local text with "
                               "--files a.txt b.jsonl") from None
        try:
            dataset = load_dataset(HF_DATASET, num_proc=num_proc)
        except (OSError, ConnectionError) as e:  # offline, or the Hub unreachable
            raise OSError(f"{e} (offline? give local text with --files a.txt b.jsonl)") from None
        split_dataset = dataset["train"].train_test_split(test_size=val_fraction, seed=seed, shuffle=True)
        split_dataset["val"] = split_dataset.pop("test")  # rename the test split to val
        docs = itertools.chain(*(zip(itertools.repeat(name), _hf_documents(split_dataset[name]))
                                 for name in ("train", "val")))  # (split, document): train's, then val's
        totals = {name: len(split_dataset[name]) for name in ("train", "val")}
        sources = [f"hf:{HF_DATASET}"]

    meta = {
        "dataset": "openwebtext" if not files else "local",
        "tokenizer": "gpt2",
        "vocab_size": VOCAB_SIZE,
        "dtype": "uint16",
        "eot_token": EOT,
        "val_fraction": val_fraction,
        "seed": seed,
        "sources": sources,
        "inputs": inputs,  # what a re-run compares (already_prepared)
    }
    pool = worker_pool(num_proc, initializer=init_worker, initargs=(ranks_file,)) if num_proc > 1 else None
    if pool is None:
        init_worker(ranks_file)
    tmps = {f"{name}.bin": out_dir / f"{name}.bin.tmp.{os.getpid()}" for name in totals}
    try:
        counts = write_tokens(docs, {name: tmps[f"{name}.bin"] for name in totals}, pool,
                              total=sum(totals.values()), chunk_docs=chunk_docs, max_inflight=4 * num_proc)
        for name, total in totals.items():
            n_tok, n_doc = counts[name]
            if n_doc != total:
                raise RuntimeError(f"{name}: wrote {n_doc} documents, expected {total}")
            if n_tok == 0:
                raise ValueError(f"the {name} split has no tokens (its documents are empty)")
            meta[f"{name}_tokens"] = n_tok
            meta[f"{name}_documents"] = n_doc
            meta["documents"] = meta.get("documents", 0) + n_doc
            print(f"{name}: {n_doc:,} documents, {n_tok:,} tokens")
        # every split complete: meta.json with the new lengths, then the renames (an interrupted run leaves the
        # old pair, or a pair that evaluate.check_token_file refuses against meta.json: never one read mixed)
        replace_together(out_dir, tmps, meta)
    except BaseException:
        for tmp in tmps.values():  # first: a terminate that hangs must not leave them
            tmp.unlink(missing_ok=True)
        if pool is not None:  # an interrupt must not wait on workers that will never report
            terminate_pool(pool)  # bounded (CPython's can hang), and then no close and join
            pool = None
        raise
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return meta


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", default=str(HERE), help="where train.bin/val.bin/meta.json go")
    p.add_argument("--files", nargs="+", default=None, help="local .txt/.jsonl/.json files instead of HF openwebtext")
    p.add_argument("--num_proc", type=int, default=DEFAULT_NUM_PROC, help="tokenizer worker processes")
    p.add_argument("--val_fraction", type=float, default=0.0005, help="fraction of documents held out for val")
    p.add_argument("--seed", type=int, default=2357, help="seed of the train/val split")
    p.add_argument("--tokenizer", default=None, help="GPT-2 ranks file (gpt2.tiktoken) for offline use")
    p.add_argument("--force", action="store_true", help="tokenize again even if out_dir holds this prepare's output")
    args = p.parse_args()
    if Path(args.out_dir).exists() and not Path(args.out_dir).is_dir():
        sys.exit(f"error: --out_dir {args.out_dir} is a file, not a folder")
    try:
        with interrupt_on_sigterm():  # a kill runs the clean-up of the temp files, as Ctrl-C does
            prepare(out_dir=args.out_dir, files=args.files, num_proc=args.num_proc, val_fraction=args.val_fraction,
                    seed=args.seed, ranks_file=args.tokenizer, force=args.force)
    except (ValueError, OSError, RuntimeError) as e:  # a file missing, unreadable, not JSON or UTF-8; no tokenizer
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("interrupted: the earlier train.bin, val.bin and meta.json are as they were (or absent, as before; "
                 "a pair that the last renames left half replaced, training refuses: re-run)")

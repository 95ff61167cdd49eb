"""
Prepare the English Wikipedia subset (an offline stand-in for OpenWebText; see README.md here)
for GPT-2 BPE training: every article is encoded with encode_ordinary and followed by one
<|endoftext|> (50256), in file order, into flat uint16 train.bin / val.bin.

    python -m data.enwiki.prepare --src ../shared/data/enwiki      # or: export TUCKER_ENWIKI_DIR=...
    python -m data.enwiki.prepare --src DIR --out_dir data/enwiki --num_proc 8 --tokenizer gpt2.tiktoken
    python -m data.enwiki.prepare --pack .carry/enwiki             # train.bin/val.bin -> compact archive
    python -m data.enwiki.prepare --unpack .carry/enwiki           # archive -> train.bin/val.bin, verified

--src is a folder holding train.txt.xz and val.txt.xz (or the decompressed train.txt, val.txt).
The text format: UTF-8, articles one after another, each followed by a line holding only
<|endoftext|>; an article is everything up to and including the newline before that line.
Tokenization runs over chunks of articles in a multiprocessing pool (--num_proc), tokens are
written in order to a temp file that is renamed only after the checks below, just after meta.json,
which records the new files' lengths (evaluate.check_token_file refuses a .bin that disagrees with it:
a pair that an interrupt left half replaced is never read).

Checks: when a file is the README's (sha256 of its uncompressed text), its article and token
counts and the sha256 of the written .bin must equal the README's (train 56,526 articles,
42,250,699 tokens; val 1,285 articles, 1,083,404 tokens), otherwise nothing is written and the
script exits non-zero. Any other text (e.g. a slice) is tokenized the same way, unchecked.

--pack writes <dir>/{train,val}.bin.xz (LZMA2 of the uint16 tokens) and <dir>/manifest.json
(sizes, token counts, sha256); --unpack decompresses them into --out_dir and checks every sha256;
it is a no-op when the .bin files there already match. The archive is what travels to a GPU
machine that has neither the text nor the tokenizer (see scripts/enwiki_gpu.sh).
"""
import argparse
import hashlib
import json
import lzma
import os
import re
import sys
import time
from collections import deque
from pathlib import Path


if not __package__:  # run as a file, the repository's tokenizer.py is not importable
    sys.exit("run from the repository root as a module: python -m data.enwiki.prepare ...")
from atomic_files import (check_num_proc, interrupt_on_sigterm, remove_stale_outputs, replace_together,  # noqa: E402
                          terminate_pool, worker_pool, write_json)
from tokenizer import EOT, VOCAB_SIZE, encode_documents, get_gpt2_encoding, init_worker  # noqa: E402

HERE = Path(__file__).resolve().parent
ENV_VAR = "TUCKER_ENWIKI_DIR"
SPLITS = ("train", "val")
DEFAULT_NUM_PROC = min(16, os.cpu_count() or 1)

# the README of the data (../shared/data/enwiki/README.md): what a complete, intact file gives
EXPECTED = {
    "train": {"articles": 56_526, "text_bytes": 190_791_239, "tokens": 42_250_699,
              "text_sha256": "8c416d4933ff7b92bcf756989dd73a341fa17d5a9f97a6debce3ead4026a5571",
              "bin_sha256": "d5ec193b2f2cd62e726be643bd7fd9742c2cd71880a6e31fbce623fb7bf17815"},
    "val": {"articles": 1_285, "text_bytes": 4_913_088, "tokens": 1_083_404,
            "text_sha256": "bceb8b6aff2f981e432e02af02feeace08d4ba887e251a3ca784ab1a1fab0f28",
            "bin_sha256": "30ee7d7b9716c42db59d96afdb7e016915736fabbf32a0a7270c2a4afebe5566"},
}
NO_SOURCE = (f"no source given: pass --src DIR or set {ENV_VAR}=DIR, a folder holding train.txt.xz and "
             f"val.txt.xz (the English Wikipedia subset shipped beside the checkout in ../shared/data/enwiki; "
             f"see data/enwiki/README.md)")

# the separator line (its line end LF or CRLF); the newline before it belongs to the article
_SEP = re.compile(r"^<\|endoftext\|>(?:\r?\n|\Z)", re.M)


class PrepareError(Exception):
    """A one-line, user-facing error (the CLI prints it and exits 1)."""


# -----------------------------------------------------------------------------
# reading


def find_source(src_dir: Path, split: str) -> Path:
    """<src>/<split>.txt if present (no decompression needed), else <src>/<split>.txt.xz."""
    for name in (f"{split}.txt", f"{split}.txt.xz"):
        if (src_dir / name).is_file():
            return src_dir / name
    raise PrepareError(f"{src_dir} has neither {split}.txt nor {split}.txt.xz: give the folder holding train.txt.xz and "
                       f"val.txt.xz (the English Wikipedia subset shipped beside the checkout in ../shared/data/enwiki; "
                       f"see data/enwiki/README.md)")


def read_text(path: Path) -> bytes:
    """The uncompressed bytes of a .txt or .txt.xz file (a damaged .xz: a PrepareError naming it)."""
    if path.suffix == ".xz":
        try:
            with lzma.open(path) as f:
                return f.read()
        except (lzma.LZMAError, EOFError) as e:
            raise PrepareError(f"{path}: {e} (a truncated or damaged .xz: copy it again); nothing written") from None
    return path.read_bytes()


def split_articles(text: str) -> list:
    """Articles of the text, each ending with its newline, separators removed. Text after the
    last separator (a file cut short) counts as one more article."""
    parts = _SEP.split(text)
    if parts and parts[-1] == "":
        parts.pop()  # the normal end: the file ends with a separator line
    return parts


# -----------------------------------------------------------------------------
# tokenizing (the pool workers are tokenizer.init_worker / encode_documents)


def _chunks(articles, chunk_chars):
    """Consecutive runs of articles of about chunk_chars characters each (balanced pool tasks)."""
    chunk, size = [], 0
    for a in articles:
        chunk.append(a)
        size += len(a)
        if size >= chunk_chars:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


class Progress:
    """One progress line on stderr: % of articles, articles/s, tokens (no tqdm dependency)."""

    def __init__(self, desc, total, quiet=False):
        self.desc, self.total, self.quiet, self.t0 = desc, total, quiet, time.time()
        self.tty = sys.stderr.isatty()
        self.every = 0.5 if self.tty else 10.0  # don't flood log files
        self.last, self.done, self.tokens = self.t0, 0, 0

    def update(self, articles, tokens):
        self.done += articles
        self.tokens += tokens
        now = time.time()
        if now - self.last >= self.every:
            self.last = now
            self._print("\r" if self.tty else "\n")

    def _print(self, end):
        if self.quiet:
            return
        dt = max(time.time() - self.t0, 1e-9)
        pct = 100 * self.done / self.total if self.total else 100.0
        print(f"{self.desc}: {pct:5.1f}% {self.done:,}/{self.total:,} articles ({self.done / dt:,.0f}/s), "
              f"{self.tokens:,} tokens, {dt:.1f}s", end=end, file=sys.stderr, flush=True)

    def close(self):
        self._print("\n")


def tokenize_to_file(articles, path: Path, pool, desc, chunk_chars=1 << 20, max_inflight=32, quiet=False):
    """Tokenize `articles` in order into the flat uint16 file `path` (written as it goes);
    returns (tokens, sha256 hex of the file). At most max_inflight chunks wait in the pool."""
    prog = Progress(desc, len(articles), quiet)
    sha, n_tokens = hashlib.sha256(), 0
    with open(path, "wb") as f:
        def drain(arr, n_art):
            nonlocal n_tokens
            b = arr.tobytes()
            f.write(b)
            sha.update(b)
            n_tokens += len(arr)
            prog.update(n_art, len(arr))

        pending = deque()
        for chunk in _chunks(articles, chunk_chars):
            if pool is None:  # num_proc=1: in this process (easy to debug)
                drain(encode_documents(chunk), len(chunk))
                continue
            pending.append((pool.apply_async(encode_documents, (chunk,)), len(chunk)))
            if len(pending) >= max_inflight:
                res, n = pending.popleft()
                drain(res.get(), n)
        while pending:
            res, n = pending.popleft()
            drain(res.get(), n)
    prog.close()
    return n_tokens, sha.hexdigest()


def _check_counts(split, stats):
    """Compare with the README's numbers; returns a list of mismatches (empty = all equal)."""
    exp = EXPECTED[split]
    return [f"{k} {stats[k]:,} != README's {exp[k]:,}" if isinstance(exp[k], int) else f"{k} differs from README's"
            for k in ("articles", "tokens", "bin_sha256") if stats[k] != exp[k]]


def prepare(src=None, out_dir=HERE, num_proc=DEFAULT_NUM_PROC, ranks_file=None, quiet=False) -> dict:
    """Tokenize <src>/{train,val}.txt[.xz] into out_dir/{train,val}.bin; return the meta dict."""
    check_num_proc(num_proc)
    src = src or os.environ.get(ENV_VAR)
    if not src:
        raise PrepareError(NO_SOURCE)
    src_dir = Path(src).expanduser()
    if not src_dir.is_dir():
        raise PrepareError(f"--src {src_dir} is not a folder: give the folder holding train.txt.xz and val.txt.xz "
                           f"(the English Wikipedia subset shipped beside the checkout in ../shared/data/enwiki; "
                           f"see data/enwiki/README.md)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_outputs(out_dir)  # temp files of an earlier prepare that was killed
    sources = {s: find_source(src_dir, s) for s in SPLITS}
    try:
        get_gpt2_encoding(ranks_file)  # fail fast (missing ranks file, offline) before the heavy work
    except (FileNotFoundError, RuntimeError) as e:
        raise PrepareError(str(e)) from None

    meta = {"dataset": "enwiki", "tokenizer": "gpt2", "vocab_size": VOCAB_SIZE, "dtype": "uint16",
            "eot_token": EOT, "num_proc": num_proc}
    t_all = time.time()
    pool = worker_pool(num_proc, initializer=init_worker, initargs=(ranks_file,)) if num_proc > 1 else None
    if pool is None:
        init_worker(ranks_file)
    tmps, ok = {}, False
    try:
        for split in SPLITS:
            t0 = time.time()
            raw = read_text(sources[split])
            text_sha = hashlib.sha256(raw).hexdigest()
            try:
                articles = split_articles(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise PrepareError(f"{sources[split]}: not UTF-8 text ({e.reason} at byte {e.start:,}); nothing "
                                   f"written") from None
            del raw
            if not articles:  # an empty split: a val.bin (or train.bin) that train.py would refuse
                raise PrepareError(f"{sources[split]} holds no article: a train and a val split both need text; "
                                   f"nothing written")
            tmps[split] = out_dir / f"{split}.bin.tmp.{os.getpid()}"
            n_tok, bin_sha = tokenize_to_file(articles, tmps[split], pool, split,
                                              max_inflight=4 * max(1, num_proc), quiet=quiet)
            stats = {"articles": len(articles), "tokens": n_tok, "text_sha256": text_sha, "bin_sha256": bin_sha,
                     "source": str(sources[split].resolve()), "seconds": round(time.time() - t0, 2)}
            full = text_sha == EXPECTED[split]["text_sha256"]
            stats["checked_against_readme"] = full
            if full:
                bad = _check_counts(split, stats)
                if bad:
                    raise PrepareError(f"{split}: {'; '.join(bad)} (tokenizer not GPT-2's?); nothing written")
            elif not quiet:
                print(f"note: {sources[split]} is not the README's {split} text (sha256 {text_sha[:12]}...); "
                      f"counts not checked", file=sys.stderr)
            for k, v in stats.items():
                meta[f"{split}_{k}"] = v
            if not quiet:
                print(f"{split}: {len(articles):,} articles, {n_tok:,} tokens"
                      f"{' (= README)' if full else ''}, {stats['seconds']:.1f}s")
        ok = True
    finally:
        if not ok:  # leave no partial output: both splits are renamed into place, or neither (first: a terminate
            for t in tmps.values():  # that hangs must not leave them)
                t.unlink(missing_ok=True)
        if pool is not None:
            if ok:
                pool.close()
                pool.join()
            else:  # an error or an interrupt: the workers' results will never be read, do not wait for them;
                terminate_pool(pool)  # bounded (CPython's terminate can hang on a chunk larger than the pipe's
                # buffer), and then no join
    meta["seconds"] = round(time.time() - t_all, 2)
    # meta.json with the new lengths first, then both renames: evaluate.check_token_file refuses a pair that an
    # interrupt left half replaced
    try:
        replace_together(out_dir, {f"{split}.bin": tmp for split, tmp in tmps.items()}, meta)
    finally:
        for t in tmps.values():
            t.unlink(missing_ok=True)
    return meta


# -----------------------------------------------------------------------------
# pack / unpack: the tokens as a compact archive for a machine without the text or tokenizer

# LZMA2 -9e with lp=1, pb=1 (positions aligned to the 2-byte tokens) and a dictionary that holds
# all of train.bin (84.5 MB); the smallest of the options measured (README.md): ~0.55 of the raw
# tokens, 12% smaller than the xz text files as shipped
PACK_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 96 << 20,
                 "lc": 3, "lp": 1, "pb": 1}]
_BUF = 1 << 22


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(_BUF):
            h.update(b)
    return h.hexdigest()


def _pack_one(args):
    src, dst, filters = args
    tmp = dst.with_name(f"{dst.name}.tmp.{os.getpid()}")
    comp = lzma.LZMACompressor(format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, filters=filters)
    with open(src, "rb") as fi, open(tmp, "wb") as fo:
        while b := fi.read(_BUF):
            fo.write(comp.compress(b))
        fo.write(comp.flush())
    os.replace(tmp, dst)
    return dst.stat().st_size


def _map_in_workers(fn, jobs) -> list:
    """fn over jobs, one worker process a job (pack's and unpack's), forked with SIGTERM at its default (worker_pool:
    main's handler would print a worker's KeyboardInterrupt traceback, or lose the signal). After a success the
    workers end on their own (close, join), not by the SIGTERM of a `with` block's terminate(); an error or
    interrupt still terminates them."""
    pool = worker_pool(len(jobs))
    try:
        out = pool.map(fn, jobs)
    except BaseException:
        terminate_pool(pool)  # bounded, as the tokenizing pool's; then no join
        raise
    pool.close()
    pool.join()
    return out


def _recorded_meta(bin_dir: Path):
    """bin_dir/meta.json as a dict, or None where there is none or it is not a JSON object."""
    try:
        recorded = json.loads((bin_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def pack(archive_dir, bin_dir=HERE, filters=None, quiet=False) -> dict:
    """bin_dir/{train,val}.bin -> archive_dir/{train,val}.bin.xz + manifest.json; returns the manifest."""
    archive_dir, bin_dir = Path(archive_dir), Path(bin_dir)
    filters = filters or PACK_FILTERS
    manifest = {"format": "xz (LZMA2) of the uint16 little-endian token files", "files": {}}
    t0 = time.time()
    recorded = _recorded_meta(bin_dir)  # the prepare's record of the lengths (None for .bin files from elsewhere)
    jobs = []
    for split in SPLITS:
        b = bin_dir / f"{split}.bin"
        if not b.is_file():
            raise PrepareError(f"{b} not found: run `python -m data.enwiki.prepare --src DIR` first")
        # as evaluate.check_token_file: a pair that an interrupted prepare left half replaced disagrees with
        # meta.json; packed, it travelled as a consistent archive (unpack writes a meta.json from the manifest)
        want = recorded.get(f"{split}_tokens") if recorded is not None else None
        if isinstance(want, int) and b.stat().st_size != 2 * want:
            raise PrepareError(f"{b} holds {b.stat().st_size // 2:,} tokens but {bin_dir / 'meta.json'} records "
                               f"{want:,}: a prepare was interrupted while it replaced the files (or they come from "
                               f"different prepares): re-run `python -m data.enwiki.prepare --src DIR`; nothing packed")
        manifest["files"][split] = {"name": f"{split}.bin.xz", "bytes": b.stat().st_size,
                                    "tokens": b.stat().st_size // 2, "sha256": _sha256_file(b)}
        jobs.append((b, archive_dir / f"{split}.bin.xz", filters))
    archive_dir.mkdir(parents=True, exist_ok=True)  # after the checks: a refused pack leaves no folder
    sizes = _map_in_workers(_pack_one, jobs)  # one process per file (xz is single-threaded)
    for split, size in zip(SPLITS, sizes):
        manifest["files"][split]["xz_bytes"] = size
    manifest["total_xz_bytes"] = sum(sizes)
    manifest["seconds"] = round(time.time() - t0, 1)
    write_json(archive_dir / "manifest.json", manifest)
    if not quiet:
        print(f"packed into {archive_dir}: " + ", ".join(
            f"{s}.bin.xz {manifest['files'][s]['xz_bytes'] / 2**20:.2f} MiB" for s in SPLITS)
            + f"; total {manifest['total_xz_bytes'] / 2**20:.2f} MiB, {manifest['seconds']:.0f}s")
    return manifest


def _unpack_one(args):
    """src (.xz) decompressed into tmp, its sha256 checked; unpack renames every split into place together."""
    src, tmp, want_sha = args
    h = hashlib.sha256()
    dec = lzma.LZMADecompressor()
    try:
        with open(src, "rb") as fi, open(tmp, "wb") as fo:
            while b := fi.read(_BUF):
                out = dec.decompress(b)
                h.update(out)
                fo.write(out)
        if not dec.eof or h.hexdigest() != want_sha:
            raise PrepareError(f"{src}: decompressed sha256 {h.hexdigest()[:12]}... != manifest's "
                               f"{want_sha[:12]}... (truncated or corrupt archive)")
    except lzma.LZMAError as e:
        tmp.unlink(missing_ok=True)
        raise PrepareError(f"{src}: {e} (truncated or corrupt archive)") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp.stat().st_size


def unpack(archive_dir, out_dir=HERE, quiet=False) -> dict:
    """archive_dir/{train,val}.bin.xz -> out_dir/{train,val}.bin, every sha256 checked (against
    the manifest and, for the full data, the README). Skips files already there and intact."""
    archive_dir, out_dir = Path(archive_dir), Path(out_dir)
    mpath = archive_dir / "manifest.json"
    if not mpath.is_file():
        raise PrepareError(f"{mpath} not found (make the archive with `python -m data.enwiki.prepare --pack DIR`)")
    try:  # every field unpack reads, before anything is written
        manifest = json.loads(mpath.read_text())
        for split in SPLITS:
            info = manifest["files"][split]
            str(info["name"]), int(info["bytes"]), int(info["tokens"]), str(info["sha256"])
    except (ValueError, KeyError, TypeError) as e:
        raise PrepareError(f"{mpath} is not a --pack manifest ({type(e).__name__}: {e}); make the archive with "
                           "`python -m data.enwiki.prepare --pack DIR`") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_outputs(out_dir)  # temp files of an earlier unpack or prepare that was killed
    t0 = time.time()
    jobs, targets, skipped = [], [], []
    for split in SPLITS:
        info = manifest["files"][split]
        dst = out_dir / f"{split}.bin"
        if dst.is_file() and dst.stat().st_size == info["bytes"] and _sha256_file(dst) == info["sha256"]:
            skipped.append(split)
            continue
        src = archive_dir / info["name"]
        if not src.is_file():
            raise PrepareError(f"{src} not found: the archive in {archive_dir} is incomplete; nothing written")
        jobs.append((src, dst.with_name(f"{dst.name}.tmp.{os.getpid()}"), info["sha256"]))
        targets.append(dst)
    meta = {"dataset": "enwiki", "tokenizer": "gpt2", "vocab_size": VOCAB_SIZE, "dtype": "uint16", "eot_token": EOT,
            "unpacked_from": str(archive_dir.resolve())}
    for split in SPLITS:
        info = manifest["files"][split]
        meta[f"{split}_tokens"] = info["tokens"]
        meta[f"{split}_bin_sha256"] = info["sha256"]
        meta[f"{split}_checked_against_readme"] = info["sha256"] == EXPECTED[split]["bin_sha256"]
    if jobs:
        try:  # every split decompressed and checked first; then meta.json, then the renames (replace_together)
            _map_in_workers(_unpack_one, jobs)
            replace_together(out_dir, {dst.name: tmp for (_, tmp, _), dst in zip(jobs, targets)}, meta)
        finally:
            for _, tmp, _ in jobs:
                tmp.unlink(missing_ok=True)
    else:  # a meta.json that prepare() wrote for these bins is kept; none, or one recording other lengths (which
        # check_token_file would refuse), is written from the manifest
        recorded = _recorded_meta(out_dir)
        if recorded is None or any(recorded.get(f"{s}_tokens") != meta[f"{s}_tokens"] for s in SPLITS):
            write_json(out_dir / "meta.json", meta)
    if not quiet:
        print(f"unpacked {archive_dir} -> {out_dir}: " + ", ".join(
            f"{s} {meta[f'{s}_tokens']:,} tokens{' (= README)' if meta[f'{s}_checked_against_readme'] else ''}"
            f"{' (already there)' if s in skipped else ''}" for s in SPLITS) + f", {time.time() - t0:.1f}s")
    return meta


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", default=None, help=f"folder with train.txt[.xz], val.txt[.xz] (default: ${ENV_VAR})")
    p.add_argument("--out_dir", default=str(HERE), help="where train.bin/val.bin/meta.json go (default: this folder)")
    p.add_argument("--num_proc", type=int, default=DEFAULT_NUM_PROC, help="tokenizer worker processes")
    p.add_argument("--tokenizer", default=None, help="GPT-2 ranks file (gpt2.tiktoken); default $TUCKER_GPT2_TIKTOKEN")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--pack", metavar="DIR", default=None, help="compress out_dir's .bin files into DIR and exit")
    g.add_argument("--unpack", metavar="DIR", default=None, help="decompress DIR's archive into out_dir and exit")
    args = p.parse_args(argv)
    with interrupt_on_sigterm():
        return _run(args)


def _run(args) -> int:
    try:
        if args.pack:
            pack(args.pack, args.out_dir)
        elif args.unpack:
            unpack(args.unpack, args.out_dir)
        else:
            prepare(args.src, args.out_dir, args.num_proc, args.tokenizer)
    except (PrepareError, OSError, EOFError, ValueError, lzma.LZMAError) as e:  # ValueError: e.g. not UTF-8 text
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: the earlier train.bin, val.bin and meta.json are as they were (or absent, as before; "
              "a pair that the last renames left half replaced, training refuses: re-run)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tokenizer and dataset preparation (offline: local ranks file, local text files)."""
import importlib
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from tokenizer import EOT, get_gpt2_encoding

# data/ has no __init__.py: data.<name>.prepare import as namespace packages (the repository root
# is importable: pytest.ini's pythonpath), which also keeps the pool's worker functions importable by name
shakespeare = importlib.import_module("data.shakespeare.prepare")
owt = importlib.import_module("data.openwebtext.prepare")


@pytest.fixture(scope="module")
def enc(gpt2_ranks_file):
    return get_gpt2_encoding(str(gpt2_ranks_file))


def test_tokenizer(enc, gpt2_ranks_file, monkeypatch):
    assert enc.encode("hello world") == [31373, 995]
    assert EOT == 50256 == enc.eot_token
    assert enc.n_vocab == 50257
    assert enc.encode("<|endoftext|>", allowed_special="all") == [EOT]
    # the environment variable is the fallback when no file is passed
    monkeypatch.setenv("TUCKER_GPT2_TIKTOKEN", str(gpt2_ranks_file))
    assert get_gpt2_encoding().encode("hello world") == [31373, 995]
    # a file passed wins over the environment variable
    monkeypatch.setenv("TUCKER_GPT2_TIKTOKEN", "/nonexistent/gpt2.tiktoken")
    assert get_gpt2_encoding(str(gpt2_ranks_file)).encode("hello world") == [31373, 995]


def test_tokenizer_file_under_the_home_folder(gpt2_ranks_file, tmp_path, monkeypatch):
    """A ranks file given as ~/... is found in the home folder (sample.py --tokenizer=~/gpt2.tiktoken: no shell
    expands a ~ after '=')."""
    (tmp_path / "gpt2.tiktoken").symlink_to(gpt2_ranks_file)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert get_gpt2_encoding("~/gpt2.tiktoken").encode("hello world") == [31373, 995]


def test_tokenizer_download_path_without_a_file(monkeypatch):
    """Without a file (the environment variable unset or empty), the encoding is tiktoken's own 'gpt2'; when that
    cannot be had (offline) the error is a RuntimeError saying to set TUCKER_GPT2_TIKTOKEN."""
    import tiktoken
    asked = []
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: asked.append(name) or "downloaded")
    for value in (None, ""):
        if value is None:
            monkeypatch.delenv("TUCKER_GPT2_TIKTOKEN", raising=False)
        else:
            monkeypatch.setenv("TUCKER_GPT2_TIKTOKEN", value)
        assert get_gpt2_encoding() == "downloaded"
    assert asked == ["gpt2", "gpt2"]

    def offline(name):
        raise ConnectionError("no network")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with pytest.raises(RuntimeError, match=r"ConnectionError: no network.*set TUCKER_GPT2_TIKTOKEN="):
        get_gpt2_encoding()


def test_tokenizer_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="TUCKER_GPT2_TIKTOKEN"):
        get_gpt2_encoding(str(tmp_path / "nope.tiktoken"))


def test_tokenizer_reads_the_file_as_it_is_now(gpt2_ranks_file, tmp_path):
    """The ranks come from the file itself each time it is loaded (tiktoken's loader would serve an earlier copy of
    the same path from its cache folder); a file that is not GPT-2's ranks is a ValueError naming the file."""
    import tokenizer
    path = tmp_path / "gpt2.tiktoken"
    lines = gpt2_ranks_file.read_bytes().splitlines(keepends=True)
    hello, world = 31373, 995  # 'hello' and ' world': their ranks swapped in the first file
    swapped = list(lines)
    swapped[hello], swapped[world] = (lines[hello].split()[0] + b" %d\n" % world,
                                      lines[world].split()[0] + b" %d\n" % hello)
    path.write_bytes(b"".join(swapped))
    tokenizer._encoding_from_ranks.cache_clear()
    assert get_gpt2_encoding(str(path)).encode("hello world") == [world, hello]
    path.write_bytes(b"".join(lines))  # the real file at the same path now
    tokenizer._encoding_from_ranks.cache_clear()
    assert get_gpt2_encoding(str(path)).encode("hello world") == [hello, world]
    path.write_bytes(b"".join(lines[:1000]))
    tokenizer._encoding_from_ranks.cache_clear()
    with pytest.raises(ValueError, match=rf"{path} is not GPT-2's ranks file: 1,000 ranks"):
        get_gpt2_encoding(str(path))
    path.write_text("First Citizen:\nBefore we proceed\n")
    with pytest.raises(ValueError, match=rf"{path}, line 1: not a `base64\(token\) rank` line"):
        get_gpt2_encoding(str(path))
    path.write_bytes(b"".join(lines[:2]) + b"!" + b"".join(lines[2:]))  # a token that is not base64 (a '!' before it)
    with pytest.raises(ValueError, match=rf"{path}, line 3: not a `base64\(token\) rank` line"):
        get_gpt2_encoding(str(path))
    path.write_bytes(lines[0].split()[0] + b" 1\n" + b"".join(lines[1:]))  # rank 1 twice, no rank 0
    with pytest.raises(ValueError, match=rf"{path} is not GPT-2's ranks file: 50,256 ranks"):
        get_gpt2_encoding(str(path))
    path.write_bytes(b"".join(lines) + b"\n\n")  # blank lines (an editor's trailing newline) are no ranks
    assert get_gpt2_encoding(str(path)).encode("hello world") == [hello, world]
    tokenizer._encoding_from_ranks.cache_clear()


def test_shakespeare(tmp_path, shakespeare_txt, gpt2_ranks_file, enc):
    meta = shakespeare.prepare(input_path=shakespeare_txt, out_dir=tmp_path, ranks_file=str(gpt2_ranks_file))
    assert (meta["train_tokens"], meta["val_tokens"]) == (301_966, 36_059)  # nanoGPT's numbers
    assert json.loads((tmp_path / "meta.json").read_text()) == meta
    assert meta["vocab_size"] == 50257 and meta["dtype"] == "uint16" and meta["tokenizer"] == "gpt2"
    assert (tmp_path / "train.bin").stat().st_size == 2 * 301_966
    assert (tmp_path / "val.bin").stat().st_size == 2 * 36_059
    assert not list(tmp_path.glob("*.tmp*"))  # atomic writes leave no temp files

    text = shakespeare_txt.read_text(encoding="utf-8")
    train = np.memmap(tmp_path / "train.bin", dtype=np.uint16, mode="r")
    val = np.memmap(tmp_path / "val.bin", dtype=np.uint16, mode="r")
    head = enc.decode(train[:100].tolist())
    assert text.startswith(head) and len(head) > 300
    # the 90/10 character split: val decodes back to exactly the last 10% of the text
    assert enc.decode(val.tolist()) == text[int(len(text) * 0.9):]


def _write_docs(tmp_path):
    """A few .txt documents, a .jsonl and a .json list; returns (files, documents in file order)."""
    docs, files = [], []
    for i in range(3):
        d = f"Document {i}: the quick brown fox jumps over the lazy dog. " * (i + 1)
        (tmp_path / f"doc{i}.txt").write_text(d, encoding="utf-8")
        files.append(tmp_path / f"doc{i}.txt")
        docs.append(d)
    jl = [f"jsonl line {i}, café ünïcode, a literal <|endoftext|> stays text.\n" * (i % 3 + 1) for i in range(12)]
    with open(tmp_path / "more.jsonl", "w", encoding="utf-8") as f:
        for d in jl:
            f.write(json.dumps({"text": d}) + "\n")
    files.append(tmp_path / "more.jsonl")
    js = ["json list document", ""]  # an empty document still gets its EOT
    (tmp_path / "list.json").write_text(json.dumps([{"text": d} for d in js]), encoding="utf-8")
    files.append(tmp_path / "list.json")
    return files, docs + jl + js


def _split_docs(tokens):
    """Split a flat token array at EOT into per-document token lists (encode_ordinary never emits EOT)."""
    assert len(tokens) == 0 or tokens[-1] == EOT
    out, start = [], 0
    for i in np.flatnonzero(tokens == EOT):
        out.append(tokens[start:i].tolist())
        start = i + 1
    return out


def test_openwebtext_local_files(tmp_path, gpt2_ranks_file, enc):
    files, docs = _write_docs(tmp_path)
    kw = dict(files=files, num_proc=2, val_fraction=0.1, seed=2357, ranks_file=str(gpt2_ranks_file), chunk_docs=2)
    meta = owt.prepare(out_dir=tmp_path / "a", **kw)

    expected = sum(len(enc.encode_ordinary(d)) + 1 for d in docs)  # + one EOT per document
    assert meta["train_tokens"] + meta["val_tokens"] == expected
    assert meta["documents"] == meta["train_documents"] + meta["val_documents"] == len(docs)
    assert meta["val_documents"] == 2 and meta["val_tokens"] > 0  # ceil(17 * 0.1)
    assert json.loads((tmp_path / "a" / "meta.json").read_text()) == meta

    # every document lands, whole and tokenized correctly, in exactly one split
    out = {}
    for split in ("train", "val"):
        tokens = np.fromfile(tmp_path / "a" / f"{split}.bin", dtype=np.uint16)
        assert len(tokens) == meta[f"{split}_tokens"]
        out[split] = [enc.decode(t) for t in _split_docs(tokens)]
        assert len(out[split]) == meta[f"{split}_documents"]
    assert sorted(out["train"] + out["val"]) == sorted(docs)

    # deterministic: same seed -> identical files, also with in-process tokenization
    owt.prepare(out_dir=tmp_path / "b", **{**kw, "num_proc": 1})
    for name in ("train.bin", "val.bin"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert not list((tmp_path / "a").glob("*.tmp*"))


@pytest.mark.parametrize("num_proc", [1, 2])
def test_openwebtext_interrupted_keeps_the_old_pair(num_proc, tmp_path, gpt2_ranks_file, monkeypatch):
    """An interrupt midway through the tokenizing pass (Ctrl-C, a kill's SIGTERM as KeyboardInterrupt) leaves the
    earlier train.bin, val.bin and meta.json as they were and no temp file: the splits replace the old ones
    together, never a new train.bin beside an old val.bin. The pool is terminated, not waited for."""
    files, _ = _write_docs(tmp_path)
    kw = dict(files=files, num_proc=num_proc, val_fraction=0.1, ranks_file=str(gpt2_ranks_file), chunk_docs=2)
    out = tmp_path / "a"
    owt.prepare(out_dir=out, seed=1, **kw)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = owt.write_tokens

    def interrupted_midway(docs, tmps, pool, **k):
        def cut():
            for i, item in enumerate(docs):
                if i == 14:  # of 17 documents
                    raise KeyboardInterrupt
                yield item
        return real(cut(), tmps, pool, **k)

    monkeypatch.setattr(owt, "write_tokens", interrupted_midway)
    import multiprocessing.pool
    terminate, terminated = multiprocessing.pool.Pool.terminate, []
    monkeypatch.setattr(multiprocessing.pool.Pool, "terminate", lambda pool: terminated.append(1) or terminate(pool))
    with pytest.raises(KeyboardInterrupt):
        owt.prepare(out_dir=out, seed=2, **kw)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert len(terminated) == (num_proc > 1)  # the pool's workers stopped, not waited for (close and join)


def test_an_interrupted_prepare_does_not_wait_on_a_pool_terminate_that_hangs(tmp_path, gpt2_ranks_file, monkeypatch,
                                                                           hanging_pool_terminate):
    """CPython's Pool.terminate can hang for ever (its task handler blocked writing a task no worker will read:
    python/cpython#73945; seen in 1 kill of ~50 of a prepare, which then never exited): an interrupted prepare
    removes its temp files first and waits on the terminate a bounded time (atomic_files.terminate_pool), then
    raises the interrupt; it neither joins the pool nor blocks."""
    import time

    joined, release, bounded = hanging_pool_terminate
    files, _ = _write_docs(tmp_path)
    real_write = owt.write_tokens

    def interrupted(docs, tmps, pool, **k):
        def cut():
            for i, item in enumerate(docs):
                if i == 14:
                    raise KeyboardInterrupt
                yield item
        return real_write(cut(), tmps, pool, **k)

    monkeypatch.setattr(owt, "write_tokens", interrupted)
    bounded(owt)
    t0 = time.time()
    with pytest.raises(KeyboardInterrupt):
        owt.prepare(out_dir=tmp_path / "o", files=files, num_proc=2, val_fraction=0.1, chunk_docs=2,
                    ranks_file=str(gpt2_ranks_file))
    elapsed = time.time() - t0
    release.set()  # let the stand-in's terminate end the workers now
    assert elapsed < 2.5, elapsed
    assert joined == []
    assert not list((tmp_path / "o").glob("*.tmp*"))


def test_openwebtext_interrupt_after_its_workers_were_killed_does_not_hang(tmp_path, gpt2_ranks_file, monkeypatch):
    """A SIGTERM to the whole process group (`kill -TERM -- -PGID`, a scheduler's stop) ends the idle workers at once,
    one of them holding the task queue's lock; the prepare's KeyboardInterrupt then stopped the pool with
    pool.terminate(), which waited for that lock forever. It now ends at once (atomic_files.stop_pool)."""
    import os
    import signal
    import threading
    import time
    files, _ = _write_docs(tmp_path)
    real = owt.write_tokens

    def group_sigterm(docs, tmps, pool, **k):
        workers = list(pool._pool)
        pool.map(abs, range(4), chunksize=1)  # the workers started; now idle, one waiting in the queue's lock
        for p in workers:
            os.kill(p.pid, signal.SIGTERM)
        deadline = time.time() + 5
        while any(p.exitcode is None for p in workers) and time.time() < deadline:
            time.sleep(0.01)
        raise KeyboardInterrupt

    monkeypatch.setattr(owt, "write_tokens", group_sigterm)
    raised = []

    def run():
        try:
            owt.prepare(out_dir=tmp_path / "o", files=files, num_proc=2, val_fraction=0.1,
                        ranks_file=str(gpt2_ranks_file))
        except KeyboardInterrupt:
            raised.append(True)
    t = threading.Thread(target=run, daemon=True)  # daemon: a hang fails the test instead of holding the run
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "the prepare hung stopping a pool whose workers a signal had ended"
    assert raised == [True] and not list((tmp_path / "o").glob("*.tmp*"))


@pytest.mark.parametrize("num_proc", [0, -1, 1.5, True])
def test_openwebtext_refuses_a_worker_count_below_one(num_proc, tmp_path, gpt2_ranks_file):
    """--num_proc 0 (or a negative or non-integer count): a ValueError naming the key before anything is read
    or written, not a pool of no workers."""
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("one", "two")))
    with pytest.raises(ValueError, match=r"^--num_proc=.*an integer of at least 1"):
        owt.prepare(out_dir=tmp_path / "o", files=[src], num_proc=num_proc, ranks_file=str(gpt2_ranks_file))
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("texts", [[], ["one document"], ["", ""]])
def test_openwebtext_too_few_documents_or_tokens(texts, tmp_path, gpt2_ranks_file):
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    if len(texts) < 2:
        with pytest.raises(ValueError, match="need at least 2"):
            owt.prepare(out_dir=tmp_path / "o", files=[src], num_proc=1, ranks_file=str(gpt2_ranks_file))
    else:  # two empty documents: each split still gets its EOT token; nothing is refused there
        meta = owt.prepare(out_dir=tmp_path / "o", files=[src], num_proc=1, ranks_file=str(gpt2_ranks_file))
        assert meta["train_tokens"] == meta["val_tokens"] == 1
    assert not list((tmp_path / "o").glob("*.bin")) or len(texts) == 2


def test_openwebtext_hf_path(tmp_path, gpt2_ranks_file, enc, monkeypatch):
    """The default path (HF datasets, nanoGPT's split) against a stand-in `datasets` module."""
    calls = {}

    class FakeDataset:
        def __init__(self, texts):
            self.texts = texts

        def __len__(self):
            return len(self.texts)

        def iter(self, batch_size):
            for i in range(0, len(self.texts), batch_size):
                yield {"text": self.texts[i:i + batch_size]}

        def train_test_split(self, test_size, seed, shuffle):
            calls["split"] = (test_size, seed, shuffle)
            return {"train": FakeDataset(self.texts[1:]), "test": FakeDataset(self.texts[:1])}

    texts = [f"web page number {i}." for i in range(5)]

    def load_dataset(name, num_proc):
        calls["load"] = (name, num_proc)
        return {"train": FakeDataset(texts)}

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    meta = owt.prepare(out_dir=tmp_path, num_proc=1, ranks_file=str(gpt2_ranks_file))
    assert calls == {"load": ("openwebtext", 1), "split": (0.0005, 2357, True)}
    val = np.fromfile(tmp_path / "val.bin", dtype=np.uint16)
    assert val.tolist() == enc.encode_ordinary(texts[0]) + [EOT]
    assert (meta["train_documents"], meta["val_documents"]) == (4, 1)
    assert meta["dataset"] == "openwebtext" and meta["sources"] == ["hf:openwebtext"] and meta["eot_token"] == EOT


@pytest.mark.parametrize("case,says", [("missing", "No such file"), ("folder", "Is a directory"),
                                       ("latin1", "is not UTF-8 text"), ("short", "too little text")])
def test_shakespeare_prepare_bad_input_is_one_line(case, says, tmp_path, gpt2_ranks_file):
    """python -m data.shakespeare.prepare: a missing, folder, non-UTF-8 or near-empty input is `error: ...` on one
    line and a non-zero exit, and writes no token file."""
    import subprocess
    import sys
    src = tmp_path / "input.txt"
    if case == "folder":
        src.mkdir()
    elif case == "latin1":
        src.write_bytes(b"caf\xe9 " * 100)
    elif case == "short":
        src.write_text("hi")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "data.shakespeare.prepare", "--input", str(src), "--out_dir", str(out),
                        "--tokenizer", str(gpt2_ranks_file)], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[1])
    err = r.stderr.strip()
    assert r.returncode != 0 and err.startswith("error: ") and len(err.splitlines()) == 1 and says in err, err
    assert not list(out.glob("*.bin"))


# -----------------------------------------------------------------------------
# a replacement interrupted, a killed prepare's temp files, a kill's clean-up


def _dead_pid() -> int:
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_pair_half_replaced_is_refused_then_a_rerun_mends_it(tmp_path, shakespeare_txt, gpt2_ranks_file,
                                                               monkeypatch):
    """meta.json, with the new lengths, is written before the renames (atomic_files.replace_together): an
    interrupt after train.bin's rename leaves a new train.bin beside the old val.bin, and check_token_file refuses
    the val.bin that meta.json does not describe, naming the fix; a re-run gives a pair that passes. Temp files
    that a killed prepare left (its pid gone) are removed by the next one; a live process's are kept."""
    import os

    from evaluate import check_token_file
    out = tmp_path / "out"
    small = tmp_path / "small.txt"
    small.write_text(Path(shakespeare_txt).read_text(encoding="utf-8")[:200_000], encoding="utf-8")
    shakespeare.prepare(input_path=small, out_dir=out, ranks_file=str(gpt2_ranks_file))
    old_val = (out / "val.bin").read_bytes()
    real, calls = os.replace, []

    def killed_after_the_first_bin(src, dst):
        if str(dst).endswith(".bin") and any(str(c).endswith(".bin") for c in calls):
            raise KeyboardInterrupt
        calls.append(dst)
        real(src, dst)

    monkeypatch.setattr(os, "replace", killed_after_the_first_bin)
    with pytest.raises(KeyboardInterrupt):
        shakespeare.prepare(input_path=shakespeare_txt, out_dir=out, ranks_file=str(gpt2_ranks_file))
    monkeypatch.setattr(os, "replace", real)
    assert (out / "val.bin").read_bytes() == old_val and not list(out.glob("*.tmp.*"))
    assert check_token_file(str(out / "train.bin"), 50304, 64) == 301_966  # the new one, as meta.json says
    with pytest.raises(ValueError, match="val.bin holds .* tokens but .*meta.json records 36,059: a prepare was "
                                         "interrupted"):
        check_token_file(str(out / "val.bin"), 50304, 64)
    dead, alive = out / f"train.bin.tmp.{_dead_pid()}", out / f"val.bin.tmp.{os.getppid()}"
    dead.write_bytes(b"\0" * 10)
    alive.write_bytes(b"\0" * 10)
    shakespeare.prepare(input_path=shakespeare_txt, out_dir=out, ranks_file=str(gpt2_ranks_file))
    assert check_token_file(str(out / "val.bin"), 50304, 64) == 36_059
    assert not dead.exists() and alive.exists()


def test_a_killed_openwebtext_prepare_leaves_the_old_pair_and_no_temp_file(tmp_path, gpt2_ranks_file):
    """SIGTERM (kill, a scheduler's stop) during tokenization: the prepare's clean-up runs as for Ctrl-C (the
    temp files removed, the pool's workers ended), its last line says so, and the earlier pair is untouched."""
    import os
    import signal
    import subprocess
    import time
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(4)))
    big = tmp_path / "big.jsonl"
    with open(big, "w") as f:
        for i in range(40_000):
            f.write(json.dumps({"text": f"Document {i}: " + "the quick brown fox jumps over the lazy dog. " * 12})
                    + "\n")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "data.openwebtext.prepare", "--out_dir", str(out), "--num_proc", "2",
           "--tokenizer", str(gpt2_ranks_file), "--files"]
    root = Path(__file__).resolve().parents[1]
    subprocess.run(cmd + [str(small)], check=True, capture_output=True, timeout=120, cwd=root)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = subprocess.Popen(cmd + [str(big)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root)
    deadline = time.time() + 60
    while not list(out.glob("train.bin.tmp.*")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None and list(out.glob("train.bin.tmp.*")), "the prepare ended before it could be killed"
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and err.strip().splitlines()[-1].startswith("interrupted:"), err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_openwebtext_bad_settings_and_files_say_where(tmp_path, gpt2_ranks_file, monkeypatch):
    """--val_fraction outside (0, 1) (nan too), a negative --seed (before: numpy's bare "expected non-negative
    integer", after the counting pass), a .jsonl line or a .json file that is not JSON, a file that is not UTF-8: a
    ValueError naming the flag or the file (and line); HF's path without `datasets` installed: one that says to
    install it or to give --files."""
    files, _ = _write_docs(tmp_path)
    kw = dict(num_proc=1, ranks_file=str(gpt2_ranks_file))
    for bad in (0.0, 1.0, 5.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match=r"--val_fraction=.*between 0 and 1"):
            owt.prepare(out_dir=tmp_path / "o", files=files, val_fraction=bad, **kw)
    with pytest.raises(ValueError, match=r"--seed=-1: .*non-negative integer"):
        owt.prepare(out_dir=tmp_path / "o", files=files, seed=-1, **kw)
    (tmp_path / "bad.jsonl").write_text(json.dumps({"text": "fine"}) + "\n{not json\n")
    (tmp_path / "bad.json").write_text("[{\"text\": \"a\"},")
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    for name, says in (("bad.jsonl", r"bad.jsonl:2: not a JSON object"), ("bad.json", r"bad.json: not JSON"),
                       ("latin1.txt", r"latin1.txt: not UTF-8 text")):
        with pytest.raises(ValueError, match=says):
            owt.prepare(out_dir=tmp_path / "o", files=files + [tmp_path / name], **kw)
    assert not (tmp_path / "o" / "train.bin").exists()
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    with pytest.raises(RuntimeError, match="pip install datasets.*--files"):
        owt.prepare(out_dir=tmp_path / "o", **kw)


def _write_corpus(d: Path):
    """Three .jsonl files, two .txt files and a .json list: 41 documents of varied length and text."""
    d.mkdir(parents=True, exist_ok=True)
    files = []
    for k in range(3):
        with open(d / f"part{k}.jsonl", "w", encoding="utf-8") as f:
            for i in range(11):
                text = f"Part {k}, page {i}: café, ünïcode, 123 numbers. " * (1 + (i * 7 + k) % 5)
                f.write(json.dumps({"text": text}) + "\n")
        files.append(d / f"part{k}.jsonl")
    for k in range(2):
        (d / f"page{k}.txt").write_text(f"A whole file, document {k}.\nSecond line.\n" * (k + 2), encoding="utf-8")
        files.append(d / f"page{k}.txt")
    (d / "list.json").write_text(json.dumps([{"text": f"json list item {i}"} for i in range(6)]), encoding="utf-8")
    files.append(d / "list.json")
    return files


@pytest.mark.parametrize("num_proc", [1, 2])
def test_openwebtext_tokenizes_both_splits_in_one_pass_over_the_files(num_proc, tmp_path, gpt2_ranks_file, enc,
                                                                      monkeypatch):
    """--files are read twice, the counting pass and one tokenizing pass that sends each document to its split
    (before: three times, every document parsed again for val's few), and train.bin and val.bin are byte for byte
    what the three-pass code wrote from the same files (its sha256s below, recorded from it), and what encoding
    each split's documents in file order gives."""
    import hashlib
    files = _write_corpus(tmp_path / "src")
    real, reads = owt._file_documents, []

    def counted(fn):
        reads.append(fn.name)
        return real(fn)

    monkeypatch.setattr(owt, "_file_documents", counted)
    out = tmp_path / "out"
    meta = owt.prepare(out_dir=out, files=files, num_proc=num_proc, val_fraction=0.2, seed=7, chunk_docs=3,
                       ranks_file=str(gpt2_ranks_file))
    assert sorted(reads) == sorted([f.name for f in files] * 2)
    sha = {s: hashlib.sha256((out / f"{s}.bin").read_bytes()).hexdigest() for s in ("train", "val")}
    assert sha == {"train": "2e5cd1a18b5a1898bc1164ae1277ca1ba67e1baffbe7d94906c14f871aef5ef1",
                   "val": "b025a018073c56e5ff262681bd358f89ad6cf04732e9246a1a79bb3168715e51"}
    docs = list(owt.iter_local_documents(files))
    is_val = owt.split_mask(len(docs), 0.2, 7)
    for split, want in (("train", False), ("val", True)):
        ids = [t for d, v in zip(docs, is_val) if v == want for t in enc.encode_ordinary(d) + [EOT]]
        assert (out / f"{split}.bin").read_bytes() == np.array(ids, dtype="<u2").tobytes()
        assert meta[f"{split}_tokens"] == len(ids) and meta[f"{split}_documents"] == int((is_val == want).sum())
    assert (meta["train_documents"], meta["val_documents"]) == (32, 9) and not list(out.glob("*.tmp*"))


def test_openwebtext_a_txt_file_is_its_bytes(tmp_path, gpt2_ranks_file, enc):
    """A .txt document is the file's text as it is: Windows line ends (and a lone \r) stay (before: read_text's
    newline translation made them \n, unlike the .jsonl documents and the other prepares' text)."""
    text = "First line\r\nsecond line\r\n\r\nan old Mac line\rend\r\n"
    (tmp_path / "crlf.txt").write_bytes(text.encode("utf-8"))
    (tmp_path / "other.txt").write_text("another document\n", encoding="utf-8")
    out = tmp_path / "out"
    owt.prepare(out_dir=out, files=[tmp_path / "crlf.txt", tmp_path / "other.txt"], num_proc=1, val_fraction=0.5,
                seed=0, ranks_file=str(gpt2_ranks_file))
    got = [enc.decode(t) for s in ("train", "val") for t in _split_docs(np.fromfile(out / f"{s}.bin", dtype=np.uint16))]
    assert text in got and "another document\n" in got


def test_openwebtext_a_file_named_twice_is_read_once(tmp_path, gpt2_ranks_file, capsys):
    """--files a.jsonl a.jsonl (overlapping globs): read once, so no document is in both splits (they were: the
    second copy's documents split anew); a folder given as a file says so."""
    files, _ = _write_docs(tmp_path)
    kw = dict(num_proc=1, val_fraction=0.2, seed=2357, ranks_file=str(gpt2_ranks_file))
    once = owt.prepare(out_dir=tmp_path / "once", files=files, **kw)
    capsys.readouterr()
    twice = owt.prepare(out_dir=tmp_path / "twice", files=files + [str(Path(files[0]).resolve())], **kw)
    assert "names 1 file(s) more than once" in capsys.readouterr().out
    for name in ("train.bin", "val.bin"):
        assert (tmp_path / "once" / name).read_bytes() == (tmp_path / "twice" / name).read_bytes()
    assert twice["documents"] == once["documents"]
    with pytest.raises(FileNotFoundError, match="is a folder"):
        owt.prepare(out_dir=tmp_path / "dir", files=[str(tmp_path)], **kw)


def test_the_split_follows_the_seed_and_keeps_the_file_order(tmp_path, gpt2_ranks_file, enc):
    """Each split holds its documents in the files' order (train and val both), and the seed picks which are val:
    another seed, another val set (60 documents, 6 held out: the same set by chance has odds 1 in C(60, 6))."""
    docs = [f"document number {i} about topic {i * 7 % 13}." for i in range(60)]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    splits = {}
    for seed in (1, 2):
        out = tmp_path / f"s{seed}"
        owt.prepare(out_dir=out, files=[src], num_proc=1, val_fraction=0.1, seed=seed, ranks_file=str(gpt2_ranks_file))
        got = {s: [enc.decode(t) for t in _split_docs(np.fromfile(out / f"{s}.bin", dtype=np.uint16))]
               for s in ("train", "val")}
        is_val = owt.split_mask(len(docs), 0.1, seed)
        assert got["val"] == [d for d, v in zip(docs, is_val) if v]  # in file order
        assert got["train"] == [d for d, v in zip(docs, is_val) if not v]
        splits[seed] = got["val"]
    assert len(splits[1]) == 6 and set(splits[1]) != set(splits[2])


def test_batches_draw_every_window_start_and_none_past_the_end(tmp_path):
    """Batches draws window offsets 0 .. n - block_size - 2 (each window block_size + 1 tokens, inside the file;
    the last possible start is drawn, none after it), and x, y are a window and its shift by one."""
    from evaluate import Batches, min_tokens
    block, n = 8, 20
    path = tmp_path / "t.bin"
    np.arange(n, dtype=np.uint16).tofile(path)
    assert n >= min_tokens(block)
    import torch
    batches = Batches(str(path), block, 4, seed=0)
    offsets = torch.cat([d.flatten() for d in batches.draw(400)])
    assert offsets.min() == 0 and offsets.max() == n - block - 2 and set(offsets.tolist()) == set(range(n - block - 1))
    x, y = batches.get(torch.tensor([n - block - 2]), torch.device("cpu"))
    assert x.tolist() == [list(range(n - block - 2, n - 2))] and y.tolist() == [list(range(n - block - 1, n - 1))]


def test_a_rerun_with_the_same_inputs_does_nothing(tmp_path, gpt2_ranks_file, monkeypatch, capsys):
    """openwebtext (hours of tokenizing): a re-run whose inputs (the files by path, size and modification time; the
    split's fraction and seed) are those meta.json records, beside token files of the lengths it records, returns
    that meta.json and tokenizes nothing; --force, another seed, or a source file changed since: tokenized again."""
    import os
    files, _ = _write_docs(tmp_path)
    kw = dict(files=files, num_proc=1, val_fraction=0.1, seed=3, ranks_file=str(gpt2_ranks_file))
    out = tmp_path / "out"
    meta = owt.prepare(out_dir=out, **kw)
    real, runs = owt.write_tokens, []

    def counted(*a, **k):
        runs.append("tokenized")
        return real(*a, **k)

    monkeypatch.setattr(owt, "write_tokens", counted)
    capsys.readouterr()
    assert owt.prepare(out_dir=out, **kw) == meta and runs == []
    assert "already prepared from these inputs" in capsys.readouterr().out
    owt.prepare(out_dir=out, **kw, force=True)
    assert runs == ["tokenized"]
    owt.prepare(out_dir=out, **{**kw, "seed": 4})
    assert runs == ["tokenized"] * 2
    st = os.stat(files[0])
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))  # edited since
    owt.prepare(out_dir=out, **{**kw, "seed": 4})
    assert runs == ["tokenized"] * 3
    (out / "val.bin").write_bytes(b"\0\0")  # not the length meta.json records: prepared again
    owt.prepare(out_dir=out, **{**kw, "seed": 4})
    assert runs == ["tokenized"] * 4


# -----------------------------------------------------------------------------
# shakespeare: the split, the meta.json, the input's sources


def test_shakespeare_splits_are_the_texts_two_parts_encoded_as_plain_text(tmp_path, shakespeare_txt,
                                                                          gpt2_ranks_file, enc):
    """train.bin is encode_ordinary of the first int(0.9 n) characters, val.bin of the rest (together: the whole
    text, no character lost or doubled at the cut); a literal "<|endoftext|>" in the text stays text (no EOT
    token); meta.json's character counts are the parts' and its sha256 is the input file's bytes'."""
    import hashlib
    text = Path(shakespeare_txt).read_text(encoding="utf-8")[:3000] + "a literal <|endoftext|> is text.\n"
    src = tmp_path / "input.txt"
    src.write_text(text, encoding="utf-8")
    meta = shakespeare.prepare(input_path=src, out_dir=tmp_path / "out", ranks_file=str(gpt2_ranks_file))
    cut = int(len(text) * 0.9)
    ids = {s: np.fromfile(tmp_path / "out" / f"{s}.bin", dtype=np.uint16).tolist() for s in ("train", "val")}
    assert ids["train"] == enc.encode_ordinary(text[:cut]) and ids["val"] == enc.encode_ordinary(text[cut:])
    assert EOT not in ids["train"] + ids["val"] and enc.decode(ids["train"]) + enc.decode(ids["val"]) == text
    assert (meta["train_chars"], meta["val_chars"]) == (cut, len(text) - cut)
    assert (meta["train_tokens"], meta["val_tokens"]) == (len(ids["train"]), len(ids["val"]))
    assert meta["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert meta["source"] == str(src.resolve()) and meta["source_url"] is None  # a local copy: no URL


def test_shakespeare_input_comes_before_the_environment(tmp_path, gpt2_ranks_file, enc, monkeypatch):
    """--input wins over TUCKER_SHAKESPEARE_TXT; without --input the variable's file is the text; a variable naming
    no file is a FileNotFoundError that names the variable (not a download, nor a bare errno)."""
    given, from_env = tmp_path / "given.txt", tmp_path / "env.txt"
    given.write_text("The text given with --input, long enough.\n" * 3)
    from_env.write_text("Another text, from the environment variable.\n" * 3)
    monkeypatch.setenv("TUCKER_SHAKESPEARE_TXT", str(from_env))
    meta = shakespeare.prepare(input_path=given, out_dir=tmp_path / "a", ranks_file=str(gpt2_ranks_file))
    assert meta["source"] == str(given.resolve())
    assert enc.decode(np.fromfile(tmp_path / "a" / "train.bin", dtype=np.uint16).tolist()).startswith("The text given")
    meta = shakespeare.prepare(out_dir=tmp_path / "b", ranks_file=str(gpt2_ranks_file))
    assert meta["source"] == str(from_env.resolve()) and meta["source_url"] is None
    monkeypatch.setenv("TUCKER_SHAKESPEARE_TXT", str(tmp_path / "nope.txt"))
    with pytest.raises(FileNotFoundError, match="TUCKER_SHAKESPEARE_TXT=.*nope.txt"):
        shakespeare.prepare(out_dir=tmp_path / "c", ranks_file=str(gpt2_ranks_file))
    assert not (tmp_path / "c" / "train.bin").exists()


def test_shakespeare_downloads_once_and_records_the_url(tmp_path, gpt2_ranks_file, monkeypatch):
    """Without --input or the variable, the text is fetched from DATA_URL into out_dir/input.txt (a stand-in for the
    network here), meta.json records the URL, and a second prepare reads the copy instead of fetching again."""
    import io
    text = b"First Citizen:\nBefore we proceed any further, hear me speak.\n" * 5
    fetched = []

    def urlopen(url, timeout):
        fetched.append(url)
        return io.BytesIO(text)

    monkeypatch.delenv("TUCKER_SHAKESPEARE_TXT", raising=False)
    monkeypatch.setattr(shakespeare.urllib.request, "urlopen", urlopen)
    for _ in range(2):
        meta = shakespeare.prepare(out_dir=tmp_path, ranks_file=str(gpt2_ranks_file))
        assert meta["source_url"] == shakespeare.DATA_URL and meta["source"] == str((tmp_path / "input.txt").resolve())
    assert fetched == [shakespeare.DATA_URL] and (tmp_path / "input.txt").read_bytes() == text


# -----------------------------------------------------------------------------
# openwebtext: the split's bounds, what a re-run compares, local formats, the pool


def test_split_mask_holds_out_ceil_n_fraction_and_leaves_train_a_document():
    """split_mask draws ceil(n * fraction) val documents, at least 1 and at most n - 1 (train is never empty, even at
    a fraction near 1), for every n >= 2; fewer than 2 documents: none."""
    import math
    for n in range(0, 40):
        for fraction in (0.0005, 0.1, 0.5, 0.9, 0.99):
            mask = owt.split_mask(n, fraction, seed=5)
            assert mask.dtype == bool and len(mask) == n
            want = 0 if n < 2 else min(max(1, math.ceil(n * fraction)), n - 1)
            assert mask.sum() == want, (n, fraction)


def test_a_rerun_compares_the_fraction_the_file_size_and_the_token_files(tmp_path, gpt2_ranks_file, monkeypatch):
    """A re-run tokenizes again when the val fraction differs, when a source file changed size with its modification
    time kept (a copy with -p), or when a token file is gone (not a FileNotFoundError), and then writes the new
    split."""
    import os
    files, _ = _write_docs(tmp_path)
    kw = dict(files=files, num_proc=1, seed=3, ranks_file=str(gpt2_ranks_file))
    out = tmp_path / "out"
    owt.prepare(out_dir=out, val_fraction=0.1, **kw)
    real, runs = owt.write_tokens, []
    monkeypatch.setattr(owt, "write_tokens", lambda *a, **k: runs.append(1) or real(*a, **k))
    meta = owt.prepare(out_dir=out, val_fraction=0.3, **kw)
    assert runs == [1] and meta["val_documents"] == 6  # ceil(17 * 0.3)
    st = os.stat(files[0])
    Path(files[0]).write_text("a different document, of another length", encoding="utf-8")
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns))
    owt.prepare(out_dir=out, val_fraction=0.3, **kw)
    assert runs == [1, 1]
    (out / "val.bin").unlink()
    meta = owt.prepare(out_dir=out, val_fraction=0.3, **kw)
    assert runs == [1, 1, 1] and (out / "val.bin").stat().st_size == 2 * meta["val_tokens"]


def test_openwebtext_fails_before_reading_documents_without_a_tokenizer_or_a_file(tmp_path, gpt2_ranks_file,
                                                                                   monkeypatch):
    """A missing ranks file, or a --files entry that does not exist, is a FileNotFoundError before any document is
    read (the counting pass over a large corpus took minutes before the error), naming what is missing."""
    files, _ = _write_docs(tmp_path)
    real, reads = owt._file_documents, []
    monkeypatch.setattr(owt, "_file_documents", lambda fn: reads.append(fn) or real(fn))
    with pytest.raises(FileNotFoundError, match="nope.tiktoken"):
        owt.prepare(out_dir=tmp_path / "o", files=files, num_proc=1, ranks_file=str(tmp_path / "nope.tiktoken"))
    with pytest.raises(FileNotFoundError, match=r"--files: .*gone.jsonl not found"):
        owt.prepare(out_dir=tmp_path / "o", files=files + [tmp_path / "gone.jsonl"], num_proc=1,
                    ranks_file=str(gpt2_ranks_file))
    assert reads == [] and not list((tmp_path / "o").glob("*.bin"))


def test_openwebtext_local_formats_skip_blank_lines_and_refuse_what_is_not_a_document(tmp_path, gpt2_ranks_file,
                                                                                      enc):
    """Blank lines of a .jsonl are no documents; a record without a string "text", a .json that is not a list, and a
    file of another type are each a ValueError naming the file (never skipped silently, nor a worker's TypeError)."""
    src = tmp_path / "gaps.jsonl"
    src.write_text("\n" + json.dumps({"text": "first"}) + "\n\n  \n" + json.dumps({"text": "second"}) + "\n\n")
    assert list(owt.iter_local_documents([src])) == ["first", "second"]
    owt.prepare(out_dir=tmp_path / "o", files=[src], num_proc=1, val_fraction=0.5, ranks_file=str(gpt2_ranks_file))
    got = [enc.decode(t) for s in ("train", "val")
           for t in _split_docs(np.fromfile(tmp_path / "o" / f"{s}.bin", dtype=np.uint16))]
    assert sorted(got) == ["first", "second"]
    bad = {"notext.jsonl": (json.dumps({"body": "x"}) + "\n", r"notext.jsonl:1: expected an object with a string"),
           "number.jsonl": (json.dumps({"text": 5}) + "\n", r"number.jsonl:1: expected an object with a string"),
           "object.json": (json.dumps({"text": "one"}), r"object.json: expected a JSON list"),
           "notes.md": ("# a markdown file\n", r"notes.md: unsupported file type '.md'")}
    for name, (content, says) in bad.items():
        (tmp_path / name).write_text(content)
        with pytest.raises(ValueError, match=says):
            owt.prepare(out_dir=tmp_path / "bad", files=[src, tmp_path / name], num_proc=1,
                        ranks_file=str(gpt2_ranks_file))
    assert not list((tmp_path / "bad").glob("*.bin"))


@pytest.mark.parametrize("change", ["grew", "shrank"])
def test_a_file_changed_between_the_counting_and_the_tokenizing_pass_is_an_error(change, tmp_path, gpt2_ranks_file,
                                                                                monkeypatch):
    """The split is drawn over the documents the counting pass found; a file that gains documents before the
    tokenizing pass (they were dropped silently) or loses some is a RuntimeError, and no token file is written."""
    files, _ = _write_docs(tmp_path)
    real, passes = owt._file_documents, {}

    def changing(fn):
        passes[fn.name] = passes.get(fn.name, 0) + 1
        docs = list(real(fn))
        if fn.name == "more.jsonl" and passes[fn.name] == 2:
            docs = docs + ["written meanwhile"] if change == "grew" else docs[:-1]
        yield from docs

    monkeypatch.setattr(owt, "_file_documents", changing)
    says = "changed during the prepare" if change == "grew" else r"wrote \d+ documents, expected \d+"
    with pytest.raises(RuntimeError, match=says):
        owt.prepare(out_dir=tmp_path / "o", files=files, num_proc=1, val_fraction=0.1, ranks_file=str(gpt2_ranks_file))
    assert not list((tmp_path / "o").glob("*.bin*"))


def test_write_tokens_keeps_at_most_max_inflight_chunks_unwritten(tmp_path, gpt2_ranks_file, enc):
    """write_tokens never has more than max_inflight chunks submitted to the pool and not yet written (memory bounded
    whatever the corpus), and still writes each split's documents in order, followed by EOT."""
    import tokenizer
    tokenizer.init_worker(str(gpt2_ranks_file))
    state = {"pending": 0, "most": 0}

    class Result:
        def __init__(self, value):
            self.value = value

        def get(self):
            state["pending"] -= 1
            return self.value

    class Pool:  # runs each chunk at once, counts what is submitted and not yet collected
        def apply_async(self, fn, args):
            state["pending"] += 1
            state["most"] = max(state["most"], state["pending"])
            return Result(fn(*args))

    docs = [("val" if i % 5 == 0 else "train", f"document {i}.") for i in range(120)]
    tmps = {s: tmp_path / f"{s}.bin.tmp" for s in ("train", "val")}
    counts = owt.write_tokens(iter(docs), tmps, Pool(), chunk_docs=2, max_inflight=4)
    assert 1 <= state["most"] <= 4 and state["pending"] == 0
    for split in ("train", "val"):
        want = [t for s, d in docs if s == split for t in enc.encode_ordinary(d) + [EOT]]
        assert np.fromfile(tmps[split], dtype=np.uint16).tolist() == want
        assert counts[split] == (len(want), sum(s == split for s, _ in docs))


def test_a_file_of_exactly_min_tokens_passes_and_every_window_fits(tmp_path):
    """min_tokens(block_size) is the shortest token file Batches can draw from: a file that long passes
    check_token_file and its drawn windows (block_size + 1 tokens) lie inside it; one token fewer is refused, naming
    the file, by check_token_file and by Batches itself (split_loss on a file no check has seen: not torch's error
    from drawing in an empty range)."""
    import re

    import torch

    from evaluate import Batches, check_token_file, min_tokens
    block = 8
    path = tmp_path / "t.bin"
    n = min_tokens(block)
    np.arange(n, dtype=np.uint16).tofile(path)
    assert check_token_file(str(path), 64, block) == n
    batches = Batches(str(path), block, 4, seed=0)
    offsets = batches.draw(5).flatten()
    assert (offsets >= 0).all() and (offsets + block + 1 <= n).all()
    x, y = batches.get(offsets, torch.device("cpu"))
    assert x.shape == y.shape == (len(offsets), block)
    np.arange(n - 1, dtype=np.uint16).tofile(path)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        check_token_file(str(path), 64, block)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*fewer than block_size \\+ 2"):
        Batches(str(path), block, 4, seed=0)


def test_an_out_of_range_id_is_found_at_every_position_across_chunks(tmp_path, monkeypatch):
    """check_token_file scans the file in chunks (evaluate.CHUNK, 4 tokens here): an id >= vocab_size is found
    wherever it lies, a chunk's first and last token included, and the position it names is the file's."""
    import evaluate
    monkeypatch.setattr(evaluate, "CHUNK", 4)
    path = tmp_path / "t.bin"
    n = 10  # two whole chunks and a part
    for bad in range(n):
        tokens = np.zeros(n, dtype=np.uint16)
        tokens[bad] = 64
        tokens.tofile(path)
        with pytest.raises(ValueError, match=rf"token id 64 \(first out-of-range id at position {bad}\)"):
            evaluate.check_token_file(str(path), 64, 4)
    assert evaluate.check_token_file(str(path), 65, 4) == n


def test_batches_follow_their_seed(tmp_path):
    """The windows Batches draws are fixed by its seed (a resumed run, an evaluation's batches) and differ between
    seeds (runs of other seeds see other data)."""
    from evaluate import Batches
    path = tmp_path / "t.bin"
    np.arange(1000, dtype=np.uint16).tofile(path)

    def drawn(seed):
        return Batches(str(path), 8, 4, seed=seed).draw(3).tolist()
    assert drawn(1) == drawn(1) and drawn(1) != drawn(2)


def _split_loss_setup(tmp_path):
    import torch

    from tiny import make
    path = tmp_path / "val.bin"
    np.random.default_rng(0).integers(0, 61, 400).astype(np.uint16).tofile(path)
    return make(dtype=torch.float32, dropout=0.5), str(path), torch.device("cpu")


def test_split_loss_is_measured_without_dropout_and_leaves_the_mode_as_it_was(tmp_path):
    """split_loss measures the model in eval mode (no dropout: the same number for a training model as for the same
    model in eval mode) and hands it back in the mode it came in, so a training run goes on with dropout."""
    from evaluate import split_loss
    model, path, cpu = _split_loss_setup(tmp_path)
    model.eval()
    expected = split_loss(model, path, 24, 2, 0, True, cpu)
    assert not model.training
    model.train()
    assert split_loss(model, path, 24, 2, 0, True, cpu) == expected and model.training


def test_split_loss_reports_progress_on_a_long_evaluation_and_its_number_is_unchanged(tmp_path, monkeypatch):
    """progress: called with (batches done, of how many) once progress_every_s has passed since the start or the
    last call, never otherwise; the loss is the same number with or without it. (A clock that advances 10 s a
    read, each call reading it twice: every second batch reports at a 15 s interval, every third at the default 30 s.)"""
    import evaluate
    model, path, cpu = _split_loss_setup(tmp_path)
    quiet = evaluate.split_loss(model, path, 24, 2, 0, True, cpu)  # 400 tokens: 16 windows of 24, 8 batches
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(evaluate, "monotonic", lambda: next(clock))
    calls = []
    loss = evaluate.split_loss(model, path, 24, 2, 0, True, cpu, progress=lambda *a: calls.append(a),
                               progress_every_s=15)
    assert loss == quiet
    assert calls == [(2, 8), (4, 8), (6, 8), (8, 8)]
    calls.clear()
    evaluate.split_loss(model, path, 24, 2, 0, True, cpu, progress=lambda *a: calls.append(a))
    assert calls == [(3, 8), (6, 8)]


def test_split_loss_with_no_batch_is_an_error_not_nan(tmp_path):
    """Zero random batches: a ValueError naming the file, not the nan of 0 / 0 tokens."""
    from evaluate import split_loss
    model, path, cpu = _split_loss_setup(tmp_path)
    with pytest.raises(ValueError, match="no batches to evaluate .*val.bin"):
        split_loss(model, path, 24, 2, 0, False, cpu)


def test_even_evaluation_runs_as_many_forwards_on_each_rank_and_counts_each_batch_once(tmp_path, monkeypatch):
    """even=True (FSDP, where each forward is a collective): each of the world's ranks runs ceil(batches / world)
    forwards, a rank with no batch left rerunning one; the sums the ranks reduce add up to one process's, each batch
    counted once. (The ranks run one after another here; all_reduce records what each rank reduces.)"""
    import torch

    from evaluate import split_loss
    model, path, cpu = _split_loss_setup(tmp_path)
    model.eval()
    forwards = []
    model.register_forward_hook(lambda *_: forwards.append(1))
    reduced = []
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda t: reduced.append(t.clone()))
    single = split_loss(model, path, 24, 2, 3, False, cpu, seed=5)  # 3 batches
    assert len(forwards) == 3 and reduced == []
    for rank in range(2):
        forwards.clear()
        split_loss(model, path, 24, 2, 3, False, cpu, seed=5, rank=rank, world=2, even=True)
        assert len(forwards) == 2, rank
    total = reduced[0] + reduced[1]
    assert total[1].item() == 3 * 2 * 24 and (total[0] / total[1]).item() == pytest.approx(single, rel=1e-12)


def test_split_loss_sums_in_float64(tmp_path):
    """The token-mean over many batches is that of the batch losses to float64 precision (a float32 running sum drifts
    with the number of batches: a whole split's thousands). A stand-in model returns known float32 losses, one token
    per batch."""
    import math

    import torch

    from evaluate import split_loss
    path = tmp_path / "t.bin"
    np.zeros(100, dtype=np.uint16).tofile(path)
    losses = torch.empty(1000).uniform_(2.0, 4.0, generator=torch.Generator().manual_seed(0))  # float32

    class KnownLosses(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x, y):
            self.calls += 1
            return None, losses[self.calls - 1]
    got = split_loss(KnownLosses(), str(path), 1, 1, len(losses), False, torch.device("cpu"))
    assert got == pytest.approx(math.fsum(losses.double().tolist()) / len(losses), rel=1e-12, abs=0)


# -----------------------------------------------------------------------------
# second mutation audit: progress, chunking, messages, what a re-run compares, meta.json, temp names, tokenizer


def test_write_tokens_prints_progress_once_an_interval_and_a_final_line(tmp_path, gpt2_ranks_file, enc, monkeypatch,
                                                                       capsys):
    """The progress line (stderr; not a terminal here, so every 10 s) gives the percent of the total, the documents
    and the tokens so far; its first line comes one interval after the start, then one an interval, and close() prints
    the final one. prepare passes the documents' total (100.0% at the end) and prints each split's counts."""
    import tokenizer
    tokenizer.init_worker(str(gpt2_ranks_file))
    clock = [1000.0]
    monkeypatch.setattr(owt, "time", types.SimpleNamespace(time=lambda: clock[0]))
    docs = [("train", f"document {i}, with some words.") for i in range(8)]

    def ticking():  # 4 s a document
        for item in docs:
            clock[0] += 4.0
            yield item
    owt.write_tokens(ticking(), {"train": tmp_path / "t.tmp", "val": tmp_path / "v.tmp"}, None, total=16, chunk_docs=1)
    tokens = np.cumsum([len(enc.encode_ordinary(d)) + 1 for _, d in docs])
    want = [f"tokenizing: {100 * k / 16:5.1f}% {k} docs (0 docs/s), {tokens[k - 1]:,} tokens, {4 * k}s"
            for k in (3, 6, 8)]
    assert capsys.readouterr().err.splitlines() == want
    monkeypatch.undo()
    files, _ = _write_docs(tmp_path)
    meta = owt.prepare(out_dir=tmp_path / "o", files=files, num_proc=1, val_fraction=0.1,
                       ranks_file=str(gpt2_ranks_file))
    out, err = capsys.readouterr()
    assert err.splitlines()[-1].startswith("tokenizing: 100.0% 17 docs (")
    assert err.splitlines()[-1].split("), ")[1].startswith(f"{meta['train_tokens'] + meta['val_tokens']:,} tokens, ")
    for s in ("train", "val"):
        assert f"{s}: {meta[f'{s}_documents']:,} documents, {meta[f'{s}_tokens']:,} tokens" in out.splitlines()


def test_write_tokens_sends_chunks_of_chunk_docs_and_removes_its_files_when_stopped(tmp_path, gpt2_ranks_file):
    """Each split's chunks hold chunk_docs documents (its last one the rest); an error or an interrupt in the middle
    propagates and removes every temp file write_tokens made (its own clean-up, whoever calls it)."""
    import tokenizer
    tokenizer.init_worker(str(gpt2_ranks_file))
    sizes = []

    class Result:
        def __init__(self, value):
            self.value = value

        def get(self):
            return self.value

    class Pool:
        def apply_async(self, fn, args):
            sizes.append(len(args[0]))
            return Result(fn(*args))

    docs = [("val" if i in (2, 5, 8) else "train", f"document {i}.") for i in range(10)]
    tmps = {s: tmp_path / f"{s}.bin.tmp" for s in ("train", "val")}
    counts = owt.write_tokens(iter(docs), tmps, Pool(), chunk_docs=3, max_inflight=8)
    assert sizes == [3, 3, 3, 1] and counts["train"][1] == 7 and counts["val"][1] == 3
    for exc in (KeyboardInterrupt, RuntimeError):
        def stopped():
            yield from docs[:5]
            raise exc("stopped")
        with pytest.raises(exc, match="stopped"):
            owt.write_tokens(stopped(), tmps, Pool(), chunk_docs=2)
        assert not list(tmp_path.iterdir())


def test_local_file_errors_say_where_and_json_files_are_utf8(tmp_path):
    """The position a bad file names is its own (the byte that is not UTF-8, the JSON error's line and column, the
    list item's index from 0); a record that is not an object is a ValueError (not an AttributeError); .json and
    .jsonl are read as UTF-8 (non-ASCII text intact, other bytes refused); only .txt/.jsonl/.json are documents."""
    import re

    def error(name, content):
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        with pytest.raises(ValueError) as e:
            list(owt.iter_local_documents([path]))
        return str(e.value)

    assert error("a.txt", b"ok \xe9 more") == (f"{tmp_path / 'a.txt'}: not UTF-8 text (invalid continuation byte "
                                                f"at byte 3)")
    line = '{"text": "x",}'
    try:
        json.loads(line)
    except json.JSONDecodeError as e:
        colno = e.colno
    assert re.search(rf"b.jsonl:2: not a JSON object \(.* at column {colno}\)$",
                     error("b.jsonl", '{"text": "fine"}\n' + line + "\n"))
    assert re.search(r"c.json: not JSON \(.* at line 3, column 3\)$", error("c.json", '[\n  {"text": "a"},\n  oops\n]'))
    assert "d.json[1]: expected an object with a string 'text' field" in error("d.json", '[{"text": "a"}, {"body": 1}]')
    for record in ('"a bare string"', '["text"]'):
        assert "e.jsonl:1: expected an object" in error("e.jsonl", record + "\n")
    assert "f.jsonl: not UTF-8 text" in error("f.jsonl", b'{"text": "caf\xe9"}\n')
    assert "g.json: not UTF-8 text" in error("g.json", b'[{"text": "caf\xe9"}]')
    for name in ("notes.text", "UPPER.TXT"):
        assert "unsupported file type" in error(name, "a document")
    texts = ["café ünïcode ☃", "日本語のテキスト"]
    (tmp_path / "h.json").write_text(json.dumps([{"text": t} for t in texts], ensure_ascii=False), encoding="utf-8")
    assert list(owt.iter_local_documents([tmp_path / "h.json"])) == texts


def test_a_rerun_tokenizes_again_after_a_damaged_meta_a_longer_token_file_or_another_file_order(tmp_path,
                                                                                             gpt2_ranks_file,
                                                                                             monkeypatch):
    """A meta.json that is not JSON or not an object, a token file longer than meta.json records, or the same files
    in another order (the documents' order, so the files' bytes, differ) is no complete earlier output: tokenized
    again, not an error and not 'nothing to do'."""
    files, _ = _write_docs(tmp_path)
    kw = dict(num_proc=1, val_fraction=0.1, seed=3, ranks_file=str(gpt2_ranks_file))
    out = tmp_path / "out"
    first = owt.prepare(out_dir=out, files=files, **kw)
    train = (out / "train.bin").read_bytes()
    real, runs = owt.write_tokens, []
    monkeypatch.setattr(owt, "write_tokens", lambda *a, **k: runs.append(1) or real(*a, **k))
    for damage in ("{not json", "[]"):
        (out / "meta.json").write_text(damage)
        assert owt.prepare(out_dir=out, files=files, **kw) == first
    with open(out / "val.bin", "ab") as f:
        f.write(b"\0\0")
    owt.prepare(out_dir=out, files=files, **kw)
    assert runs == [1, 1, 1] and (out / "val.bin").stat().st_size == 2 * first["val_tokens"]
    owt.prepare(out_dir=out, files=files[::-1], **kw)
    assert runs == [1, 1, 1, 1] and (out / "train.bin").read_bytes() != train


def test_openwebtext_meta_records_its_sources_split_and_temp_names(tmp_path, gpt2_ranks_file, monkeypatch):
    """meta.json of --files: dataset 'local', every source file (resolved), the fraction and the seed, and the inputs
    a re-run compares; the temp files carry the pid (a killed prepare's are then found stale) and a dead writer's
    left beside the outputs are removed; a folder in --files says to give its files."""
    import os
    files, _ = _write_docs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    dead = out / f"val.bin.tmp.{_dead_pid()}"
    dead.write_bytes(b"\0" * 6)
    real, temps = owt.replace_together, []
    monkeypatch.setattr(owt, "replace_together", lambda d, t, m: temps.extend(t.values()) or real(d, t, m))
    meta = owt.prepare(out_dir=out, files=files, num_proc=1, val_fraction=0.1, seed=3, ranks_file=str(gpt2_ranks_file))
    resolved = [str(Path(f).resolve()) for f in files]
    assert meta["dataset"] == "local" and meta["sources"] == resolved
    assert (meta["val_fraction"], meta["seed"]) == (0.1, 3) and not dead.exists()
    assert [s["path"] for s in meta["inputs"]["sources"]] == resolved and meta["inputs"]["seed"] == 3
    assert sorted(Path(t).name for t in temps) == [f"train.bin.tmp.{os.getpid()}", f"val.bin.tmp.{os.getpid()}"]
    with pytest.raises(FileNotFoundError, match=r"is a folder: give its files \(e\.g\. .*\*\.jsonl\)"):
        owt.prepare(out_dir=out, files=[tmp_path], num_proc=1, ranks_file=str(gpt2_ranks_file))


def test_openwebtext_hf_meta_and_an_empty_split(tmp_path, gpt2_ranks_file, monkeypatch):
    """HF's path records its source (in the inputs a re-run compares too), the fraction and the seed; a split that
    HF's train_test_split left without a document is a ValueError (an empty val.bin is a file train.py refuses)."""
    class Split:
        def __init__(self, texts):
            self.texts = texts

        def __len__(self):
            return len(self.texts)

        def iter(self, batch_size):
            yield {"text": self.texts}

    class Dataset(Split):
        def train_test_split(self, test_size, seed, shuffle):
            return {"train": Split(self.texts[n_val:]), "test": Split(self.texts[:n_val])}

    texts = [f"web page number {i}." for i in range(4)]
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=lambda name, num_proc: {
        "train": Dataset(texts)}))
    n_val = 1
    meta = owt.prepare(out_dir=tmp_path / "a", num_proc=1, val_fraction=0.25, seed=9, ranks_file=str(gpt2_ranks_file))
    assert meta["inputs"]["sources"] == ["hf:openwebtext"] and (meta["val_fraction"], meta["seed"]) == (0.25, 9)
    n_val = 0
    with pytest.raises(ValueError, match="the val split has no tokens"):
        owt.prepare(out_dir=tmp_path / "b", num_proc=1, ranks_file=str(gpt2_ranks_file))
    assert not list((tmp_path / "b").glob("*.bin*"))


def test_openwebtext_out_dir_that_is_a_file_is_one_line(tmp_path, gpt2_ranks_file):
    import subprocess
    (tmp_path / "a.txt").write_text("one document")
    (tmp_path / "out").write_text("a file")
    r = subprocess.run([sys.executable, "-m", "data.openwebtext.prepare", "--out_dir", str(tmp_path / "out"),
                        "--tokenizer", str(gpt2_ranks_file), "--files", str(tmp_path / "a.txt")],
                       capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode != 0 and r.stderr.strip() == f"error: --out_dir {tmp_path / 'out'} is a file, not a folder"


def test_shakespeare_bounds_messages_temp_names_and_an_interrupted_download(tmp_path, gpt2_ranks_file, monkeypatch):
    """Too little text counts characters (10 pass, 9 two-byte ones do not); a file not UTF-8 names the byte; a given
    --input that is missing is its own error (not the environment variable's, which names a file that exists); the
    temp files carry the pid; a download interrupted while written leaves no input.txt (a re-run would take a part
    for the text)."""
    import io
    import os
    kw = dict(ranks_file=str(gpt2_ranks_file))
    src = tmp_path / "in.txt"
    src.write_text("é" * 9, encoding="utf-8")
    with pytest.raises(ValueError, match="holds 9 characters"):
        shakespeare.prepare(input_path=src, out_dir=tmp_path / "a", **kw)
    src.write_text("0123456789")
    real, temps = shakespeare.replace_together, []
    monkeypatch.setattr(shakespeare, "replace_together", lambda d, t, m: temps.extend(t.values()) or real(d, t, m))
    assert shakespeare.prepare(input_path=src, out_dir=tmp_path / "b", **kw)["val_chars"] == 1
    assert sorted(Path(t).name for t in temps) == [f"train.bin.tmp.{os.getpid()}", f"val.bin.tmp.{os.getpid()}"]
    src.write_bytes(b"abc\xe9 and more text")
    with pytest.raises(ValueError, match=r"in.txt is not UTF-8 text \(invalid continuation byte at byte 3\)"):
        shakespeare.prepare(input_path=src, out_dir=tmp_path / "c", **kw)
    src.write_text("a text from the environment variable")
    monkeypatch.setenv("TUCKER_SHAKESPEARE_TXT", str(src))
    with pytest.raises(FileNotFoundError) as e:
        shakespeare.prepare(input_path=tmp_path / "missing.txt", out_dir=tmp_path / "d", **kw)
    assert "TUCKER_SHAKESPEARE_TXT" not in str(e.value) and "missing.txt" in str(e.value)
    monkeypatch.delenv("TUCKER_SHAKESPEARE_TXT")
    monkeypatch.setattr(shakespeare.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"x" * 1000))
    real_write = Path.write_bytes

    def killed_midway(self, data):
        real_write(self, data[:100])
        raise KeyboardInterrupt
    monkeypatch.setattr(Path, "write_bytes", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        shakespeare.prepare(out_dir=tmp_path / "e", **kw)
    monkeypatch.setattr(Path, "write_bytes", real_write)
    assert list((tmp_path / "e").iterdir()) == []


def test_tokenizer_paths_and_ranks_lines(gpt2_ranks_file, tmp_path, monkeypatch):
    """A relative ranks path is the file in the current folder now (not a cached one of another folder); an empty
    ranks_file falls back to TUCKER_GPT2_TIKTOKEN; a folder is no ranks file; a rank that is not an integer is a bad
    line, shown cut to 60 bytes; any failure of tiktoken's download (not only OSError) says to set the variable."""
    import os

    import tiktoken

    import tokenizer
    lines = gpt2_ranks_file.read_bytes().splitlines(keepends=True)
    hello, world = 31373, 995
    swapped = list(lines)
    swapped[hello], swapped[world] = (lines[hello].split()[0] + b" %d\n" % world,
                                      lines[world].split()[0] + b" %d\n" % hello)
    for name, content in (("a", swapped), ("b", lines)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "gpt2.tiktoken").write_bytes(b"".join(content))
    tokenizer._encoding_from_ranks.cache_clear()
    try:
        monkeypatch.chdir(tmp_path / "a")
        assert get_gpt2_encoding("gpt2.tiktoken").encode("hello world") == [world, hello]
        monkeypatch.chdir(tmp_path / "b")
        assert get_gpt2_encoding("gpt2.tiktoken").encode("hello world") == [hello, world]
        monkeypatch.setenv("TUCKER_GPT2_TIKTOKEN", str(tmp_path / "a" / "gpt2.tiktoken"))
        assert get_gpt2_encoding("").encode("hello world") == [world, hello]
        with pytest.raises(FileNotFoundError, match="GPT-2 ranks file not found: .*TUCKER_GPT2_TIKTOKEN"):
            get_gpt2_encoding(str(tmp_path / "a"))
        bad = tmp_path / "bad.tiktoken"
        bad.write_bytes(lines[0].split()[0] + b" 0.0\n" + b"".join(lines[1:]))
        with pytest.raises(ValueError, match=rf"{bad}, line 1: not a `base64\(token\) rank` line"):
            get_gpt2_encoding(str(bad))
        bad.write_bytes(b"QUJD " + b"9" * 500 + b"x\n")
        with pytest.raises(ValueError) as e:
            get_gpt2_encoding(str(bad))
        assert str(e.value).endswith(repr(b"QUJD " + b"9" * 55))
    finally:
        tokenizer._encoding_from_ranks.cache_clear()

    def broken(name):
        raise ValueError("hash mismatch")
    monkeypatch.delenv("TUCKER_GPT2_TIKTOKEN")
    monkeypatch.setattr(tiktoken, "get_encoding", broken)
    with pytest.raises(RuntimeError, match="ValueError: hash mismatch.*set TUCKER_GPT2_TIKTOKEN="):
        get_gpt2_encoding()
    assert os.getcwd() == str(tmp_path / "b")


def test_init_worker_in_the_main_process_keeps_its_sigterm_handler(gpt2_ranks_file):
    """In-process tokenizing (num_proc=1) calls init_worker in prepare's own process: SIGTERM stays the interrupt that
    runs the clean-up (only a pool's worker puts the default back)."""
    import signal

    import tokenizer
    from atomic_files import interrupt_on_sigterm
    with interrupt_on_sigterm():
        inside = signal.getsignal(signal.SIGTERM)
        tokenizer.init_worker(str(gpt2_ranks_file))
        assert signal.getsignal(signal.SIGTERM) is inside

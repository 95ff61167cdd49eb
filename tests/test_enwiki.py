"""The enwiki table (issue 15): data preparation on a small slice, the pack/unpack round trip, the
rows and their protocol, every run's real command for 2 iterations at tiny size, the GPU script's
plan, and the results report on synthetic runs. CPU only, about a minute."""
import json
import lzma
import math
import os
import re
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest

from scripts.paper_tables import (ENWIKI_CHECKPOINT_ROWS, ENWIKI_EXTRA_SEEDS, ENWIKI_ROWS, ENWIKI_SEED_ROWS,
                                  OWT_ROWS, TABLES, all_runs, build_config)
from tokenizer import EOT, get_gpt2_encoding

import data.enwiki.prepare as enwiki

REPO = Path(__file__).resolve().parents[1]

# three articles in the data's format: title line, text, then a line holding only <|endoftext|>;
# the middle one holds a literal <|endoftext|> inside a line (ordinary text, not a separator)
ARTICLES = [
    "Advanced Chemistry\n\nAdvanced Chemistry is a German hip hop group from Heidelberg, Baden-Württemberg.\n",
    "Tokens\n\nA line may say <|endoftext|> in the middle, and “quotes” or ünïcödé.\nSecond paragraph.\n",
    "Formula\n\nSome markup leftovers remain, e.g. formula_1 placeholders.\n",
]
VAL_ARTICLES = ["Val\n\nOne held-out article about the river Neckar. " + "It flows through Heidelberg. " * 8 + "\n"]


def _text(articles):
    return "".join(a + "<|endoftext|>\n" for a in articles)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _slow_unpack_one(args):
    """Stands in for prepare._unpack_one in a pool worker: marks that it runs (beside the output folder), then takes
    long."""
    import time
    _, tmp, _ = args
    (tmp.parent.parent / f"started-{tmp.name}").touch()
    time.sleep(30)


def _write_src(d: Path, xz=True):
    d.mkdir(parents=True, exist_ok=True)
    for split, arts in (("train", ARTICLES), ("val", VAL_ARTICLES)):
        raw = _text(arts).encode("utf-8")
        if xz:
            (d / f"{split}.txt.xz").write_bytes(lzma.compress(raw))
        else:
            (d / f"{split}.txt").write_bytes(raw)
    return d


@pytest.fixture(scope="module")
def enc(gpt2_ranks_file):
    return get_gpt2_encoding(str(gpt2_ranks_file))


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory, gpt2_ranks_file):
    """The slice prepared once (xz input, two worker processes)."""
    root = tmp_path_factory.mktemp("enwiki")
    src = _write_src(root / "src")
    meta = enwiki.prepare(src=str(src), out_dir=root / "data", num_proc=2, ranks_file=str(gpt2_ranks_file), quiet=True)
    return root / "data", meta


# -----------------------------------------------------------------------------
# prepare.py


def test_split_articles():
    assert enwiki.split_articles(_text(ARTICLES)) == ARTICLES
    assert enwiki.split_articles(_text(ARTICLES) + "cut short\n") == ARTICLES + ["cut short\n"]
    assert enwiki.split_articles(_text(ARTICLES)[:-1]) == ARTICLES  # the last separator without its newline
    assert enwiki.split_articles("") == []


def test_split_articles_with_crlf_line_ends():
    """A text with Windows line ends splits at the same separator lines (before: two articles became one, with a
    literal <|endoftext|> tokenized as text inside it)."""
    crlf = _text(ARTICLES).replace("\n", "\r\n")
    assert enwiki.split_articles(crlf) == [a.replace("\n", "\r\n") for a in ARTICLES]


@pytest.mark.parametrize("case, says", [("empty_val", "val.txt holds no article"),
                                        ("truncated_xz", "train.txt.xz: .* truncated or damaged .xz"),
                                        ("latin1", "val.txt: not UTF-8 text")])
def test_prepare_refuses_an_empty_split_or_a_damaged_file_by_name(case, says, tmp_path, gpt2_ranks_file, capsys):
    """An empty split (before: an empty val.bin written, exit 0), a truncated .xz or a non-UTF-8 text: an error
    line naming the file (the last on stderr, after the train split's progress), exit 1, no token file written."""
    src = _write_src(tmp_path / "src", xz=False)
    if case == "empty_val":
        (src / "val.txt").write_text("")
    elif case == "truncated_xz":
        raw = lzma.compress((src / "train.txt").read_bytes())
        (src / "train.txt").unlink()
        (src / "train.txt.xz").write_bytes(raw[:len(raw) // 2])
    else:
        (src / "val.txt").write_bytes(b"caf\xe9\n<|endoftext|>\n")
    out = tmp_path / "out"
    assert enwiki.main(["--src", str(src), "--out_dir", str(out), "--num_proc", "1",
                        "--tokenizer", str(gpt2_ranks_file)]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the train split's progress lines, if any
    assert last.startswith("error: ") and re.search(says, last), last
    assert not list(out.glob("*.bin")) and not list(out.glob("*.tmp.*"))


def test_prepare_slice(tiny_data, enc):
    out, meta = tiny_data
    for split, arts in (("train", ARTICLES), ("val", VAL_ARTICLES)):
        expect = []
        for a in arts:  # encode_ordinary per article + one EOT after each
            expect += enc.encode_ordinary(a) + [EOT]
        got = np.fromfile(out / f"{split}.bin", dtype=np.uint16)
        assert got.tolist() == expect
        assert (out / f"{split}.bin").read_bytes() == np.array(expect, dtype="<u2").tobytes()
        assert meta[f"{split}_tokens"] == len(expect) == sum(len(enc.encode_ordinary(a)) + 1 for a in arts)
        assert meta[f"{split}_articles"] == len(arts)
        assert meta[f"{split}_checked_against_readme"] is False  # not the README's text
    assert json.loads((out / "meta.json").read_text()) == meta
    assert not list(out.glob("*.tmp*"))
    # the literal <|endoftext|> inside a line stays text: exactly one EOT per article
    assert int((np.fromfile(out / "train.bin", dtype=np.uint16) == EOT).sum()) == len(ARTICLES)


def test_prepare_plain_text_in_process(tmp_path, tiny_data, gpt2_ranks_file):
    """Decompressed .txt input and num_proc=1 give the same bytes; a .txt is read in preference to the .txt.xz beside
    it (here an archive of other text); the temp files that a killed prepare left in out_dir are removed."""
    src = _write_src(tmp_path / "src", xz=False)
    (src / "train.txt.xz").write_bytes(lzma.compress(_text(ARTICLES[:1]).encode("utf-8")))
    (tmp_path / "out").mkdir()
    stale = tmp_path / "out" / f"val.bin.tmp.{_dead_pid()}"
    stale.write_bytes(b"\0" * 10)
    enwiki.prepare(src=str(src), out_dir=tmp_path / "out", num_proc=1, ranks_file=str(gpt2_ranks_file), quiet=True)
    for split in ("train", "val"):
        assert (tmp_path / "out" / f"{split}.bin").read_bytes() == (tiny_data[0] / f"{split}.bin").read_bytes()
    assert not stale.exists()


def test_tokens_come_out_in_article_order_over_many_pool_tasks(tmp_path, gpt2_ranks_file, enc):
    """tokenize_to_file writes the articles' tokens in file order when they are spread over many pool tasks and more
    are waiting than it keeps in flight (one article a task here, at most 3 in flight): as one process gives them."""
    import hashlib
    import multiprocessing as mp

    from tokenizer import init_worker
    articles = [f"Article {i}\n\n" + "word " * i + "\n" for i in range(12)]
    expect = [t for a in articles for t in [*enc.encode_ordinary(a), EOT]]
    with mp.Pool(2, initializer=init_worker, initargs=(str(gpt2_ranks_file),)) as pool:
        n, sha = enwiki.tokenize_to_file(articles, tmp_path / "t.bin", pool, "t", chunk_chars=1, max_inflight=3,
                                         quiet=True)
    assert np.fromfile(tmp_path / "t.bin", dtype=np.uint16).tolist() == expect and n == len(expect)
    assert sha == hashlib.sha256(np.array(expect, dtype="<u2").tobytes()).hexdigest()


def test_prepare_checks_readme_numbers(tmp_path, monkeypatch, gpt2_ranks_file, enc):
    """A file whose text sha256 is the README's must give the README's counts, else nothing is written."""
    import hashlib
    src = _write_src(tmp_path / "src")
    tokens = sum(len(enc.encode_ordinary(a)) + 1 for a in VAL_ARTICLES)
    sha = hashlib.sha256(_text(VAL_ARTICLES).encode()).hexdigest()
    good = {"articles": 1, "tokens": tokens, "text_sha256": sha, "text_bytes": 0, "bin_sha256": None}
    bin_sha = hashlib.sha256(np.array([*enc.encode_ordinary(VAL_ARTICLES[0]), EOT], dtype="<u2").tobytes()).hexdigest()
    monkeypatch.setitem(enwiki.EXPECTED, "val", {**good, "bin_sha256": bin_sha})
    meta = enwiki.prepare(src=str(src), out_dir=tmp_path / "ok", num_proc=1, ranks_file=str(gpt2_ranks_file), quiet=True)
    assert meta["val_checked_against_readme"] is True and meta["train_checked_against_readme"] is False

    monkeypatch.setitem(enwiki.EXPECTED, "val", {**good, "bin_sha256": bin_sha, "tokens": tokens + 1})
    with pytest.raises(enwiki.PrepareError, match="tokens"):
        enwiki.prepare(src=str(src), out_dir=tmp_path / "bad", num_proc=1, ranks_file=str(gpt2_ranks_file), quiet=True)
    assert not list((tmp_path / "bad").iterdir())  # neither split written, no temp files left

    monkeypatch.setitem(enwiki.EXPECTED, "val", {**good, "bin_sha256": "0" * 64})  # the counts right, other tokens
    with pytest.raises(enwiki.PrepareError, match="bin_sha256 differs"):
        enwiki.prepare(src=str(src), out_dir=tmp_path / "bad2", num_proc=1, ranks_file=str(gpt2_ranks_file), quiet=True)
    assert not list((tmp_path / "bad2").iterdir())


def test_prepare_cli_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(enwiki.ENV_VAR, raising=False)
    assert enwiki.main(["--out_dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no source given") and enwiki.ENV_VAR in err and "\n" not in err
    monkeypatch.setenv(enwiki.ENV_VAR, str(tmp_path))  # a folder without the files
    assert enwiki.main(["--out_dir", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err  # a source given (its folder lacks the files): not "no source given"
    assert "has neither train.txt nor train.txt.xz: give the folder holding" in err and "no source given" not in err
    (tmp_path / "train.txt.xz").write_bytes(b"")  # --src naming a file, not its folder: not "no source given"
    assert enwiki.main(["--src", str(tmp_path / "train.txt.xz"), "--out_dir", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "is not a folder: give the folder holding train.txt.xz" in err and "no source given" not in err
    src = tmp_path / "src"  # a good source, no worker to tokenize it: one line, nothing written
    _write_src(src)
    for bad in ("0", "-2"):
        assert enwiki.main(["--src", str(src), "--out_dir", str(tmp_path / "n"), "--num_proc", bad]) == 1
        err = capsys.readouterr().err.strip()
        assert err == f"error: --num_proc={bad}: the number of tokenizer processes, an integer of at least 1 (1 " \
                      f"tokenizes in this process)"
    assert not (tmp_path / "n").exists()


def test_pack_unpack_roundtrip(tmp_path, tiny_data):
    data, meta = tiny_data
    man = enwiki.pack(tmp_path / "carry", bin_dir=data, quiet=True)
    assert sorted(p.name for p in (tmp_path / "carry").iterdir()) == ["manifest.json", "train.bin.xz", "val.bin.xz"]
    assert man["files"]["train"]["tokens"] == meta["train_tokens"]
    (tmp_path / "out").mkdir()
    stale = tmp_path / "out" / f"train.bin.tmp.{_dead_pid()}"  # a killed unpack's
    stale.write_bytes(b"\0" * 10)
    got = enwiki.unpack(tmp_path / "carry", out_dir=tmp_path / "out", quiet=True)
    for split in ("train", "val"):
        assert (tmp_path / "out" / f"{split}.bin").read_bytes() == (data / f"{split}.bin").read_bytes()
        assert got[f"{split}_tokens"] == meta[f"{split}_tokens"]
        assert got[f"{split}_checked_against_readme"] is False  # not the README's tokens
    assert not stale.exists()
    before = (tmp_path / "out" / "train.bin").stat().st_mtime_ns
    enwiki.unpack(tmp_path / "carry", out_dir=tmp_path / "out", quiet=True)  # intact: not rewritten
    assert (tmp_path / "out" / "train.bin").stat().st_mtime_ns == before
    other = np.fromfile(data / "train.bin", dtype=np.uint16)[::-1].copy()  # the same length, other tokens: unpacked
    other.tofile(tmp_path / "out" / "train.bin")
    enwiki.unpack(tmp_path / "carry", out_dir=tmp_path / "out", quiet=True)
    assert (tmp_path / "out" / "train.bin").read_bytes() == (data / "train.bin").read_bytes()
    # bins intact: a meta.json that records their lengths is kept (prepare's fields with it), one that records other
    # lengths (another slice's prepare, or unreadable) is rewritten from the manifest (it had been kept unchecked)
    kept = {**json.loads((tmp_path / "out" / "meta.json").read_text()), "articles": 7}
    (tmp_path / "out" / "meta.json").write_text(json.dumps(kept))
    enwiki.unpack(tmp_path / "carry", out_dir=tmp_path / "out", quiet=True)
    assert json.loads((tmp_path / "out" / "meta.json").read_text()) == kept
    for stale in (json.dumps({**kept, "val_tokens": meta["val_tokens"] + 1}), "{"):
        (tmp_path / "out" / "meta.json").write_text(stale)
        enwiki.unpack(tmp_path / "carry", out_dir=tmp_path / "out", quiet=True)
        assert json.loads((tmp_path / "out" / "meta.json").read_text()) == got
    # a damaged archive is refused and leaves nothing behind
    m = json.loads((tmp_path / "carry" / "manifest.json").read_text())
    m["files"]["val"]["sha256"] = "0" * 64
    (tmp_path / "carry" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(enwiki.PrepareError, match="sha256"):
        enwiki.unpack(tmp_path / "carry", out_dir=tmp_path / "out2", quiet=True)
    assert not (tmp_path / "out2" / "val.bin").exists() and not list((tmp_path / "out2").glob("*.tmp*"))
    assert not (tmp_path / "out2" / "train.bin").exists()  # both splits or neither: train's was intact


def test_pack_and_unpack_through_main_print_no_worker_traceback(tmp_path, tiny_data, capfd, monkeypatch):
    """main's SIGTERM handler is not inherited by pack's and unpack's pool workers: the pool's terminate() on leaving
    its block printed their KeyboardInterrupt tracebacks after runs that succeeded (in 4 of 6 runs of a review). After
    a success the workers end on their own, sent no signal: a SIGTERM that reached a worker before its initializer had
    put SIGTERM back to its default was lost, and the pool waited for that worker forever (a hang after a pack or
    unpack that had succeeded: 2 of about 20 runs of this test under load, and 1 in 26 of a loop of the two)."""
    data, _ = tiny_data
    signals, real_kill = [], os.kill

    def kill(pid, sig):
        if sig:  # signal 0: pid_alive's question whether a temp file's writer still runs
            signals.append(sig)
        real_kill(pid, sig)
    monkeypatch.setattr(os, "kill", kill)
    for k in range(3):
        assert enwiki.main(["--pack", str(tmp_path / f"c{k}"), "--out_dir", str(data)]) == 0
        assert enwiki.main(["--unpack", str(tmp_path / f"c{k}"), "--out_dir", str(tmp_path / f"o{k}")]) == 0
    err = capfd.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert signals == []


def test_pack_refuses_a_pair_half_replaced_by_an_interrupted_prepare(tmp_path, tiny_data, gpt2_ranks_file,
                                                                     monkeypatch, capsys):
    """A prepare over earlier output, interrupted between the renames (a new train.bin beside the old val.bin, and
    the meta.json that check_token_file compares them with): --pack refuses the pair, naming the fix, and writes
    no archive (before: it packed the pair and --unpack wrote a meta.json from the manifest that agreed with both,
    so the GPU machine trained on the mixed pair)."""
    data, _ = tiny_data
    out = tmp_path / "out"
    out.mkdir()
    for name in ("train.bin", "val.bin", "meta.json"):
        (out / name).write_bytes((data / name).read_bytes())
    src = tmp_path / "src2"  # another slice: other lengths
    src.mkdir()
    for split, arts in (("train", ARTICLES[:2]), ("val", VAL_ARTICLES * 2)):
        (src / f"{split}.txt").write_text(_text(arts), encoding="utf-8")
    real = os.replace

    def interrupted_before_val(src_path, dst):
        if str(dst).endswith("val.bin"):
            raise KeyboardInterrupt
        real(src_path, dst)

    monkeypatch.setattr(os, "replace", interrupted_before_val)
    with pytest.raises(KeyboardInterrupt):
        enwiki.prepare(src=str(src), out_dir=out, num_proc=1, ranks_file=str(gpt2_ranks_file), quiet=True)
    monkeypatch.setattr(os, "replace", real)
    assert (out / "val.bin").read_bytes() == (data / "val.bin").read_bytes()  # the old val.bin, a new train.bin
    assert not list(out.glob("*.tmp.*"))  # the interrupted prepare's temp file of val.bin is gone
    assert enwiki.main(["--pack", str(tmp_path / "carry"), "--out_dir", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and re.search(r"val.bin holds .* tokens but .*meta.json "
                                                                       r"records .*re-run", err), err
    assert not (tmp_path / "carry").exists()
    enwiki.prepare(src=str(src), out_dir=out, num_proc=1, ranks_file=str(gpt2_ranks_file), quiet=True)  # re-run
    assert enwiki.main(["--pack", str(tmp_path / "carry"), "--out_dir", str(out)]) == 0


def test_an_interrupted_prepare_does_not_wait_on_a_pool_terminate_that_hangs(tmp_path, gpt2_ranks_file, monkeypatch,
                                                                           hanging_pool_terminate):
    """As OpenWebText's (tests/test_data.py): CPython's Pool.terminate can hang for ever on a task larger than the
    pipe's buffer (enwiki's chunks are 1 MB), so an interrupted tokenizing removes its temp files first and waits on
    the terminate a bounded time (atomic_files.terminate_pool), never joining the pool; the interrupt comes out."""
    import time

    joined, release, bounded = hanging_pool_terminate
    src = _write_src(tmp_path / "src", xz=False)
    real_tokenize = enwiki.tokenize_to_file

    def interrupted(articles, path, pool, split, **kwargs):
        if split == "val":  # train.bin's temp file written, val's begun
            path.write_bytes(b"\0" * 8)
            raise KeyboardInterrupt
        return real_tokenize(articles, path, pool, split, **kwargs)

    monkeypatch.setattr(enwiki, "tokenize_to_file", interrupted)
    bounded(enwiki)
    t0 = time.time()
    with pytest.raises(KeyboardInterrupt):
        enwiki.prepare(src=str(src), out_dir=tmp_path / "out", num_proc=2, ranks_file=str(gpt2_ranks_file),
                       quiet=True)
    elapsed = time.time() - t0
    release.set()  # let the stand-in's terminate end the workers now
    assert elapsed < 2.5, elapsed
    assert joined == []
    assert not list((tmp_path / "out").glob("*.tmp*"))


@pytest.mark.parametrize("manifest", ['{"format": "xz"}', "not json", '{"files": {"train": {"name": "t"}}}',
                                      '{"files": {"train": {"name": "t"}, "val": {"name": "v"}}}'])
def test_unpack_of_a_manifest_that_is_not_one_is_one_line(manifest, tmp_path, capsys):
    (tmp_path / "carry").mkdir()
    (tmp_path / "carry" / "manifest.json").write_text(manifest)
    assert enwiki.main(["--unpack", str(tmp_path / "carry"), "--out_dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a --pack manifest" in err and "manifest.json" in err, err
    assert not (tmp_path / "out").exists()


def test_unpack_of_a_damaged_archive_keeps_the_old_pair(tmp_path, tiny_data):
    """Unpacking another archive over prepared data: a truncated val.bin.xz (cut in its middle, or only its last byte
    gone: a copy that stopped short), or a missing one, is one error and the
    old train.bin, val.bin and meta.json stay as they were (the splits replace the old ones together)."""
    data, _ = tiny_data
    out = tmp_path / "out"
    out.mkdir()
    for name in ("train.bin", "val.bin", "meta.json"):
        (out / name).write_bytes((data / name).read_bytes())
    for name in ("train.bin", "val.bin"):  # "older" data: the archive's files differ, both are unpacked
        old = (out / name).read_bytes()
        (out / name).write_bytes(old[: len(old) // 4 * 2])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    carry = tmp_path / "carry"
    enwiki.pack(carry, bin_dir=data, quiet=True)  # train.bin.xz intact (its job succeeds), val.bin.xz cut below
    xz = (carry / "val.bin.xz").read_bytes()
    (carry / "val.bin.xz").write_bytes(xz[: len(xz) // 2])
    assert enwiki.main(["--unpack", str(carry), "--out_dir", str(out)]) == 1
    (carry / "val.bin.xz").write_bytes(xz[:-1])  # cut in the stream's last bytes (after every token's data)
    assert enwiki.main(["--unpack", str(carry), "--out_dir", str(out)]) == 1
    (carry / "val.bin.xz").unlink()
    assert enwiki.main(["--unpack", str(carry), "--out_dir", str(out)]) == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_meta_json_that_is_not_an_object_is_as_none(tmp_path, tiny_data):
    """A meta.json holding JSON but not an object (not a prepare's record) counts as no record: pack packs the .bin
    files beside it, and an unpack over intact .bin files replaces it with the archive's record."""
    data, _ = tiny_data
    bins = tmp_path / "bins"
    bins.mkdir()
    for name in ("train.bin", "val.bin"):
        (bins / name).write_bytes((data / name).read_bytes())
    (bins / "meta.json").write_text("[]")
    enwiki.pack(tmp_path / "carry", bin_dir=bins, quiet=True)
    got = enwiki.unpack(tmp_path / "carry", out_dir=tmp_path / "out", quiet=True)
    (tmp_path / "out" / "meta.json").write_text("[1, 2]")
    enwiki.unpack(tmp_path / "carry", out_dir=tmp_path / "out", quiet=True)
    assert json.loads((tmp_path / "out" / "meta.json").read_text()) == got


def test_a_sigterm_during_an_unpack_ends_its_workers_quietly_and_writes_nothing(tmp_path, tiny_data, capfd,
                                                                              monkeypatch):
    """SIGTERM while unpack's workers decompress: main's clean-up runs (one line, exit 1, nothing written) and the
    workers, stopped by the pool, end as plain processes do, without a KeyboardInterrupt traceback each."""
    import signal
    import threading
    import time
    data, _ = tiny_data
    enwiki.pack(tmp_path / "carry", bin_dir=data, quiet=True)
    monkeypatch.setattr(enwiki, "_unpack_one", _slow_unpack_one)

    def stop_once_both_run():
        deadline = time.time() + 20
        while len(list(tmp_path.glob("started-*"))) < 2 and time.time() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=stop_once_both_run, daemon=True).start()
    assert enwiki.main(["--unpack", str(tmp_path / "carry"), "--out_dir", str(tmp_path / "out")]) == 1
    err = capfd.readouterr().err
    assert err.startswith("interrupted: the earlier train.bin") and err.count("\n") == 1, err
    assert not list((tmp_path / "out").iterdir())


def test_a_sigterm_during_a_prepare_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    """SIGTERM (kill, a scheduler's stop) while main runs is handled as Ctrl-C: the clean-up runs and one line says
    the earlier files are as they were, exit 1 (not left to the process's own SIGTERM handler, not a traceback)."""
    import signal

    def killed(*args, **kwargs):
        signal.raise_signal(signal.SIGTERM)

    def not_main(signum, frame):
        raise AssertionError("SIGTERM reached the process's own handler")
    monkeypatch.setattr(enwiki, "prepare", killed)
    before = signal.signal(signal.SIGTERM, not_main)
    try:
        rc = enwiki.main(["--src", str(tmp_path), "--out_dir", str(tmp_path / "out")])
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped main")
    finally:
        signal.signal(signal.SIGTERM, before)
    err = capsys.readouterr().err.strip()
    assert rc == 1 and err.startswith("interrupted: the earlier train.bin, val.bin and meta.json") and "\n" not in err


# -----------------------------------------------------------------------------
# rows, configs, protocol


def test_rows_and_protocol():
    import configurator
    from scripts.paper_tables import default_train_keys, format_override, run_overrides
    t = TABLES["enwiki"]
    assert t.reported_loss == "final_val_loss" and t.seq_len == 1024 and t.kv_unit == "MB"
    assert [r.id for r in ENWIKI_ROWS] == ["mha", "gqa4", "gqa2", "mla_gqa2_equiv", "mla_gqa2_equiv_latent",
                                           "mla_shared128", "mla_shared_latent128", "tucker_8_128_128",
                                           "tucker_8_128_64", "tucker_8_64_64"]
    assert len(list(all_runs("enwiki"))) == 18
    owt = {r.id: r for r in OWT_ROWS}
    for row in ENWIKI_ROWS:
        for rope in row.rope_settings:
            argv = [str(REPO / row.config)] + [format_override(k, v) for k, v in run_overrides(row, rope).items()]
            cfg = configurator.parse_config(argv, default_train_keys())
            protocol = dict(batch_size=32, gradient_accumulation_steps=1, block_size=1024, max_iters=1300,
                            lr_decay_iters=1300, warmup_iters=100, learning_rate=6e-4, min_lr=6e-5, weight_decay=0.1,
                            beta1=0.9, beta2=0.95, grad_clip=1.0, dtype="bfloat16", compile=True, eval_interval=250,
                            eval_iters=40, eval_full_val=True, dataset="enwiki", bias=False, n_layer=12, n_head=12,
                            n_embd=768, dropout=0.0, decay_lr=True)
            assert {k: cfg[k] for k in protocol} == protocol, (row.id, rope)
            assert cfg["pos_emb"] == ("rope" if rope == "on" else "learned")
            if "latent" in row.id:
                assert cfg["mla_rope"] == "latent" and row.rope_settings == ("on",)
            # the paper's OpenWebText numbers, NaN exactly where it reports none
            src = owt[row.id].paper.get(rope) if row.id in owt else None
            for col in ("attn_params_mb", "kv_cache_mb", "val_loss"):
                v = row.paper[rope][col]
                assert (math.isnan(v) if src is None else v == src[col]), (row.id, rope, col)
    assert set(ENWIKI_SEED_ROWS) | set(ENWIKI_CHECKPOINT_ROWS) <= {r.id for r in ENWIKI_ROWS}
    assert build_config(t.row("tucker_8_64_64"), "on")["tucker_ranks"] == (8, 64, 64)


TINY = ["--device=cpu", "--compile=False", "--dtype=float32", "--n_layer=1", "--n_embd=128", "--n_head=8",
        "--block_size=16", "--batch_size=1", "--max_iters=2", "--lr_decay_iters=2", "--warmup_iters=1",
        "--eval_iters=1", "--eval_interval=2", "--log_interval=1"]


def test_every_run_trains_two_iterations(tmp_path, tiny_data, monkeypatch):
    """Every enwiki run's command as scripts.sweep builds it for the GPU, at tiny size on the slice: train.py's
    main in this process (one import of torch for the 18 runs)."""
    import train
    from scripts.sweep import plan
    monkeypatch.chdir(REPO)  # the commands name config files relative to the repository root
    runs = tmp_path / "runs"
    todo = plan("enwiki", results_dir=runs, extra=[*TINY, f"--data_dir={tiny_data[0]}"])
    assert len(todo) == 18
    for name, out_dir, cmd in todo:
        assert cmd[1] == "train.py"
        train.main(cmd[2:])
    for row, rope in all_runs("enwiki"):
        s = json.loads((runs / f"{row.id}-rope_{rope}-s1337" / "summary.json").read_text())
        assert s["finished"] and s["iters"] == 2 and math.isfinite(s["final_val_loss"]), (row.id, rope)
        assert s["model_config"]["pos_emb"] == ("rope" if rope == "on" else "learned")


def _gpu_plan(ngpu, tmp_path):
    env = {**os.environ, "DRY_RUN": "1", "NGPU": str(ngpu), "RUNS": str(tmp_path / f"runs{ngpu}")}
    res = subprocess.run(["bash", "scripts/enwiki_gpu.sh", "300", "--", "--compile=False"], cwd=REPO,
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    cmds = [shlex.split(line) for line in res.stdout.splitlines() if "train.py" in line]
    plan = []
    for cmd in cmds:
        opts = dict(a[2:].split("=", 1) for a in cmd if a.startswith("--") and "=" in a)
        row, rest = Path(opts["out_dir"]).name.split("-rope_")
        plan.append((row, rest.split("-s")[0], int(opts["seed"]), opts.get("save_checkpoint") != "False",
                     opts["compile"]))
    return plan


def test_gpu_script_plan(tmp_path):
    """scripts/enwiki_gpu.sh runs every row in both settings and the seed runs, once each, in priority
    order, with checkpoints exactly for MHA and the Tucker rows at seed 1337."""
    want = {(r.id, rope, 1337) for r, rope in all_runs("enwiki")}
    want |= {(rid, rope, s) for rid in ENWIKI_SEED_ROWS for rope in ("off", "on") for s in ENWIKI_EXTRA_SEEDS}
    for ngpu in (1, 4):
        plan = _gpu_plan(ngpu, tmp_path)
        assert len(plan) == len(want) == 26 and {p[:3] for p in plan} == want
        assert all(p[4] == "False" for p in plan)  # the overrides after -- reach train.py
        for row, rope, seed, ckpt, _ in plan:
            assert ckpt == (row in ENWIKI_CHECKPOINT_ROWS and seed == 1337), (row, rope, seed)
        first = [p[:2] for p in plan[:4]]
        if ngpu == 1:  # learned positions first
            assert first == [("mha", "off"), ("tucker_8_64_64", "off"), ("mha", "on"), ("tucker_8_64_64", "on")]
        else:
            assert sorted(first) == sorted([("mha", "off"), ("mha", "on"), ("tucker_8_64_64", "off"),
                                            ("tucker_8_64_64", "on")])
        assert {p[0] for p in plan[4:8]} == {"mla_shared128", "gqa2"}
        assert all(p[2] != 1337 for p in plan[-8:])  # seeds last


# -----------------------------------------------------------------------------
# results


def _fake_run(runs, row, rope, seed, final, best_offset=-0.05):
    """A run folder as train.py writes it: summary.json (final != best, to see which is read) and log.jsonl."""
    import torch
    from model import GPT, GPTConfig
    cfg = build_config(TABLES["enwiki"].row(row), rope)
    with torch.device("meta"):
        model = GPT(GPTConfig(**cfg))
    d = runs / f"{row}-rope_{rope}-s{seed}"
    d.mkdir(parents=True)
    s = {"config": cfg, "model_config": cfg, "git_commit": "abc", "best_val_loss": final + best_offset,
         "best_iter": 1250, "final_val_loss": final, "iters": 1300, "tokens": 1300 * 32 * 1024, "wall_time_s": 120.0,
         "attn_params": model.attn_params(), "kv_values_per_token_per_layer": model.kv_values_per_token_per_layer(),
         "device_name": "NVIDIA H100", "finished": True, "stopped_reason": "max_iters"}
    (d / "summary.json").write_text(json.dumps(s))
    lines = [{"iter": i, "train_loss": final + 1 / (1 + i / 100), "val_loss": final + 2 / (1 + i / 100)}
             for i in (0, 250, 500, 750, 1000, 1250)] + [{"iter": 1300, "train_loss": final, "val_loss": final}]
    lines += [{"iter": i, "loss": final + 3 / (1 + i / 50), "lr": 1e-4} for i in range(10, 1301, 10)]
    (d / "log.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")


def test_results_report(tmp_path):
    from scripts import results
    runs = tmp_path / "runs"
    fake = {("mha", "off"): [3.50, 3.52, 3.48], ("tucker_8_64_64", "off"): [3.60, 3.62, 3.58],
            ("mha", "on"): [3.40], ("tucker_8_128_64", "off"): [3.56], ("mla_shared128", "off"): [3.70],
            ("mla_shared_latent128", "on"): [3.45]}
    for (row, rope), losses in fake.items():
        for seed, loss in zip((1337, 1, 2), losses):
            _fake_run(runs, row, rope, seed, loss)
    out = tmp_path / "out"
    results.main(["enwiki", "--runs", str(runs), "--out", str(out)])
    recs = json.loads((out / "table.json").read_text())  # strict JSON: no NaN
    by = {(r["row"], r["rope"]): r for r in recs}
    assert len(recs) == 18
    assert by[("mha", "off")]["val_loss"] == pytest.approx(3.50)  # the final loss, not the best
    assert by[("mha", "off")]["val_loss_std"] == pytest.approx(0.02) and by[("mha", "off")]["n_seeds"] == 3
    assert by[("tucker_8_64_64", "off")]["gap_to_mha_pct"] == pytest.approx(100 * (3.60 / 3.50 - 1))
    assert by[("tucker_8_64_64", "off")]["paper_gap_to_mha_pct"] == pytest.approx(100 * (2.950 / 2.861 - 1))
    assert by[("mha", "off")]["attn_params_mb"] == pytest.approx(56.623104)
    assert by[("gqa4", "off")]["val_loss"] is None and by[("gqa4", "off")]["attn_params_mb"] == pytest.approx(37.748736)
    assert by[("mla_shared_latent128", "on")]["paper"]["val_loss"] is None  # the paper has no such cell
    # KV cache by hand: values per token per layer x 12 layers x 1024 tokens x 2 bytes (bf16), in MB
    kv_mb = lambda values: values * 12 * 1024 * 2 / 1e6  # noqa: E731
    assert by[("mha", "off")]["kv_cache_mb"] == pytest.approx(kv_mb(2 * 768))
    assert by[("gqa4", "off")]["kv_cache_mb"] == pytest.approx(kv_mb(2 * 4 * 64))
    assert by[("mla_shared128", "off")]["kv_cache_mb"] == pytest.approx(kv_mb(128))  # one latent, key and value
    assert by[("mla_shared128", "on")]["kv_cache_mb"] == pytest.approx(kv_mb(128 + 64 // 2))  # + rotary key, dH/2
    assert by[("tucker_8_128_64", "off")]["kv_cache_mb"] == pytest.approx(kv_mb(64 + 64))  # r3 + r~3
    md = (out / "table.md").read_text()
    assert "not run" in md and "3.5000 ± 0.0200" in md and "+2.86% ± 0.57" in md
    assert f"| MHA | {4 * 768**2 * 12 * 2 / 1e6:.2f} / 56.62 | {kv_mb(2 * 768):.3f} / 37.74 | 3.5000 ± 0.0200 | 3 |" in md
    claims = (out / "claims.md").read_text()
    assert "pooled sample std 0.0200" in claims
    assert "gap +2.86% ± 0.93%" in claims  # 100 * 2 * 0.02 * sqrt(2/3) / 3.50
    assert "MLA − GQA-2 not run" in claims
    # Tucker [8,128,64] vs MLA shared 128, w/o RoPE: 3.70 - 3.56 = +0.140 beyond a band of 2*0.02*sqrt(2)
    assert "other − Tucker +0.140 (noise band ±0.057): holds" in claims
    for png in ("pareto_attn_params.png", "pareto_kv_cache.png", "val_curves.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _summaries(runs, losses, **extra):
    """A summary.json per seed of each (row, rope): the row's own config, its final val loss (no model counted)."""
    for (row, rope), seeds in losses.items():
        for seed, loss in zip((1337, 1, 2), seeds):
            d = runs / f"{row}-rope_{rope}-s{seed}"
            d.mkdir(parents=True)
            s = {"config": build_config(TABLES["enwiki"].row(row), rope), "final_val_loss": loss, "best_iter": 1300,
                 "finished": True, **{k: v(row, rope, seed) for k, v in extra.items()}}
            (d / "summary.json").write_text(json.dumps(s))


def test_results_claims_signs_and_verdicts(tmp_path):
    """claims.md's differences have the sign its headings state (other − Tucker, shared − separated, on − off, latent −
    decoupled, MLA − GQA-2, and the paper's the same way), each judged against its own band (MHA w/o RoPE run with 3
    seeds, std 0.01: 2·0.01·sqrt(1/3 + 1) = 0.023 against a 1-seed row, 0.028 between two) in the direction the
    claim expects; Tucker's share of MHA's attention parameters, its gap against the paper's (smaller / larger beyond
    the band); the count of rows RoPE improves; the largest rise of the training loss after warmup, the worst seed's."""
    from scripts import results
    runs = tmp_path / "runs"
    _summaries(runs, {("mha", "off"): [3.50, 3.51, 3.49], ("mha", "on"): [3.45], ("gqa2", "off"): [3.50],
                      ("mla_gqa2_equiv", "off"): [3.55], ("mla_shared128", "off"): [3.70], ("mla_shared128", "on"): [3.60],
                      ("mla_shared_latent128", "on"): [3.75], ("tucker_8_128_128", "off"): [3.53],
                      ("tucker_8_128_64", "off"): [3.52], ("tucker_8_64_64", "off"): [3.60],
                      ("tucker_8_64_64", "on"): [3.62]})
    # logged training losses of MHA w/o RoPE: seed 1337 rises by 4 during warmup (not counted) and by 0.3 after it,
    # seed 1 only falls
    for seed, pts in ((1337, [(50, 5.0), (60, 9.0), (110, 4.0), (120, 4.3), (130, 3.9)]), (1, [(110, 4.0), (120, 3.9)])):
        (runs / f"mha-rope_off-s{seed}" / "log.jsonl").write_text(
            "".join(json.dumps({"iter": i, "loss": v, "lr": 1e-4}) + "\n" for i, v in pts))
    recs = results.collect("enwiki", runs)
    sigma, n_pooled = results.seed_noise(recs)
    assert (sigma, n_pooled) == (pytest.approx(0.01), 1)
    claims = results.enwiki_claims(recs, results.load_logs(runs), sigma, n_pooled)
    # attention params by Table 1: Tucker [8,128,64] 2 (nH r1 + d r2 + d r3 + r1 r2 r3) per layer, MHA 4 d^2
    share = 100 * 2 * (12 * 8 + 768 * 128 + 768 * 64 + 8 * 128 * 64) / (4 * 768**2)
    share_128 = 100 * 2 * (12 * 8 + 2 * 768 * 128 + 8 * 128 * 128) / (4 * 768**2)
    for line in [
        f"- w/o RoPE, Tucker [8,128,128] ({share_128:.1f}% of MHA's attention params): loss 3.530 vs MHA 3.500, gap "
        "+0.86% ± 0.66% (paper +0.24%); worse than MHA: holds; ours vs the paper's gap: agrees within noise",
        f"- w/o RoPE, Tucker [8,128,64] ({share:.1f}% of MHA's attention params): loss 3.520 vs MHA 3.500, gap "
        "+0.57% ± 0.66% (paper +1.96%); worse than MHA: within noise; ours vs the paper's gap: smaller",
        "- w/o RoPE: Tucker [8,128,128] 3.530 vs GQA [nG=2] 3.500 (KV 6.291 vs 6.291 MB, attn 15.73 vs 33.03 MB; paper "
        "2.868 vs 2.869): other − Tucker -0.030 (noise band ±0.028): does not hold (opposite sign, beyond noise)",
        "  - Tucker [8,128,128] → Tucker [8,128,64] -0.010 (noise band ±0.028) (paper +0.049): within noise",
        "- w/o RoPE: MLA shared K,V [dcK,dcQ=128] 3.700 vs MLA [GQA, nG=2 equiv.] 3.550 (paper +0.055): +0.150 "
        "(noise band ±0.028): shared worse: holds",
        "- MHA: 3.500 → 3.450: -0.050 (noise band ±0.023) (paper -0.030): RoPE better: holds",
        "- Tucker [8,64,64]: 3.600 → 3.620: +0.020 (noise band ±0.028) (paper +0.000): RoPE better: within noise",
        "- mean over 3 rows -0.043, 2/3 improve with RoPE",
        "  - MLA shared K,V; latent RoPE [dcK,dcQ=128] 3.750 vs decoupled 3.600: +0.150 (noise band ±0.028) (latent "
        "worse beyond noise)",
        "- w/o RoPE: MLA 3.550 vs GQA-2 3.500: MLA − GQA-2 +0.050 (noise band ±0.028): does not hold (MLA worse beyond "
        "noise)",
    ]:
        assert line in claims.splitlines() or any(x.startswith(line) for x in claims.splitlines()), line
    assert claims.split("## 7. Training stability")[1].splitlines()[-1] == "- MHA w/o RoPE: largest rise +0.300"
    # no seed spread yet: every difference unjudged (no comparison with the paper's gap), a side without a run 'not run'
    unjudged = results.enwiki_claims(recs, {}, None, 0).splitlines()
    for line in ["- w/o RoPE, Tucker [8,128,64] (18.1% of MHA's attention params): loss 3.520 vs MHA 3.500, gap +0.57% "
                 "(paper +1.96%); worse than MHA: unjudged (no seed spread yet)",
                 "- w/ RoPE: Tucker [8,128,64] not run vs MLA shared K,V [dcK,dcQ=128] 3.600 (paper 2.908 vs 2.885): "
                 "other − Tucker not run: not run",
                 "- w/o RoPE: MLA 3.550 vs GQA-2 3.500: MLA − GQA-2 +0.050: unjudged (no seed spread yet)"]:
        assert line in unjudged, line


def test_results_table_header_counts_runs_seeds_and_rows_not_run(tmp_path, capsys):
    """table.md's header line counts the (row, RoPE) entries with runs and the runs themselves, names the devices
    (runs that do not say are no device), gives the range of wall times over every run; below the table, the entries
    not run and the seed rows without their three seeds (two are not three). A run of a RoPE setting its row does not
    have (latent RoPE without RoPE) is named and counted nowhere."""
    from scripts import results
    runs = tmp_path / "runs"
    walls = {("mha", "off"): (100.0, 110.0, 120.0), ("tucker_8_64_64", "off"): (150.0, 200.0), ("gqa2", "on"): (None,)}
    _summaries(runs, {("mha", "off"): [3.50, 3.51, 3.49], ("tucker_8_64_64", "off"): [3.60, 3.62],
                      ("gqa2", "on"): [3.55]},
               wall_time_s=lambda row, rope, seed: walls[(row, rope)][(1337, 1, 2).index(seed)],
               device_name=lambda row, rope, seed: "NVIDIA H100" if seed == 1 else None)
    d = runs / "mla_gqa2_equiv_latent-rope_off-s1337"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"final_val_loss": 3.5, "best_iter": 1300, "finished": True}))
    recs = results.collect("enwiki", runs)
    assert "warning: runs for ('mla_gqa2_equiv_latent', 'off') match no row of enwiki; ignored" in capsys.readouterr().err
    md = results.enwiki_markdown(recs, runs, *results.seed_noise(recs))
    assert f"Runs from `{runs}`: 3/18 (row, RoPE) entries, 6 runs; devices: NVIDIA H100; wall time per run 100–200 s; " \
           "seed spread (pooled sample std over 2 entries with several seeds): " in md
    assert "Not run: mha/on, gqa4/off, gqa4/on, gqa2/off, mla_gqa2_equiv/off, mla_gqa2_equiv/on, " in md
    assert "Seed runs (1337, 1, 2) incomplete for: mha/on, tucker_8_64_64/off, tucker_8_64_64/on.\n" in md

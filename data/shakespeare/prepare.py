"""
Prepare tiny Shakespeare for GPT-2 BPE training, as nanoGPT's data/shakespeare does:
the first 90% of the characters are train, the last 10% val, each encoded with the
GPT-2 tokenizer and written as a flat uint16 token file. (The paper calls its Shakespeare runs
"character-level language modeling" and then names the tokenizer, tiktoken's gpt2: we follow the
tokenizer. It does not say how it splits the text: nanoGPT's 90/10 here.)

    python -m data.shakespeare.prepare                        # downloads input.txt
    python -m data.shakespeare.prepare --input path/to/input.txt --tokenizer gpt2.tiktoken

Offline, the environment variables TUCKER_SHAKESPEARE_TXT (the input file) and
TUCKER_GPT2_TIKTOKEN (the GPT-2 ranks file) stand in for --input and --tokenizer.

Writes train.bin (301,966 tokens), val.bin (36,059 tokens) and meta.json into --out_dir
(default: this folder). Read them back with np.memmap(path, dtype=np.uint16, mode='r').
"""
import argparse
import hashlib
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

if not __package__:  # run as a file, the repository's tokenizer.py is not importable
    sys.exit("run from the repository root as a module: python -m data.shakespeare.prepare ...")
from atomic_files import atomic_write, interrupt_on_sigterm, remove_stale_outputs, replace_together  # noqa: E402
from tokenizer import VOCAB_SIZE, get_gpt2_encoding  # noqa: E402

DATA_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
HERE = Path(__file__).resolve().parent


def download(out_dir: Path) -> Path:
    """Fetch tiny Shakespeare into out_dir/input.txt unless it is already there."""
    path = out_dir / "input.txt"
    if not path.exists():
        print(f"downloading {DATA_URL} -> {path}")
        with urllib.request.urlopen(DATA_URL, timeout=60) as r:
            data = r.read()
            atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))
    return path


def prepare(input_path=None, out_dir=HERE, ranks_file=None) -> dict:
    """Tokenize tiny Shakespeare into out_dir/{train,val}.bin and return the meta dict."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_outputs(out_dir)  # temp files of an earlier prepare that was killed
    from_env = not input_path and bool(os.environ.get("TUCKER_SHAKESPEARE_TXT"))
    input_path = input_path or os.environ.get("TUCKER_SHAKESPEARE_TXT") or None
    downloaded = input_path is None
    input_path = download(out_dir) if downloaded else Path(input_path)
    if from_env and not input_path.is_file():
        raise FileNotFoundError(f"TUCKER_SHAKESPEARE_TXT={str(input_path)!r}: no such file (unset it to download "
                                f"the text, or give --input)")

    raw = input_path.read_bytes()
    try:
        data = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{input_path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    if len(data) < 10:  # each split needs text: 10% of nothing is an empty val.bin train.py refuses
        raise ValueError(f"{input_path} holds {len(data)} characters: too little text for a train and a val split")
    # split on characters (not tokens), exactly as nanoGPT, so token counts match its numbers
    n = len(data)
    train_data = data[: int(n * 0.9)]
    val_data = data[int(n * 0.9):]

    # encode_ordinary: plain text, any literal "<|endoftext|>" is NOT turned into the special token
    enc = get_gpt2_encoding(ranks_file)
    train_ids = np.array(enc.encode_ordinary(train_data), dtype=np.uint16)
    val_ids = np.array(enc.encode_ordinary(val_data), dtype=np.uint16)
    print(f"train has {len(train_ids):,} tokens")
    print(f"val has {len(val_ids):,} tokens")

    meta = {
        "dataset": "shakespeare",
        "tokenizer": enc.name,
        "vocab_size": VOCAB_SIZE,
        "dtype": "uint16",
        "train_tokens": int(len(train_ids)),
        "val_tokens": int(len(val_ids)),
        "train_chars": len(train_data),
        "val_chars": len(val_data),
        "source": str(input_path.resolve()),
        "source_url": DATA_URL if downloaded else None,  # None: a local copy was given
        "source_sha256": hashlib.sha256(raw).hexdigest(),
    }
    temps = {name: out_dir / f"{name}.tmp.{os.getpid()}" for name in ("train.bin", "val.bin")}
    try:
        for (name, tmp), ids in zip(temps.items(), (train_ids, val_ids)):
            tmp.write_bytes(ids.tobytes())
        # meta.json (with the new lengths) first, then both renames: a reader refuses a pair half replaced
        replace_together(out_dir, temps, meta)
    finally:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
    return meta


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", default=None, help="local input.txt (default: download to out_dir/input.txt)")
    p.add_argument("--out_dir", default=str(HERE), help="where train.bin/val.bin/meta.json go")
    p.add_argument("--tokenizer", default=None, help="GPT-2 ranks file (gpt2.tiktoken) for offline use")
    args = p.parse_args()
    try:
        with interrupt_on_sigterm():  # a kill runs the clean-up of the temp files, as Ctrl-C does
            prepare(input_path=args.input, out_dir=args.out_dir, ranks_file=args.tokenizer)
    except OSError as e:  # a missing or unreadable input or ranks file, a folder given as one; no network
        hint = (" (offline: give the text with --input or TUCKER_SHAKESPEARE_TXT)"
                if isinstance(e, urllib.error.URLError) else "")
        sys.exit(f"error: {e}{hint}")
    except (ValueError, RuntimeError) as e:  # not UTF-8 text, too short; a ranks file that is not one
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("interrupted: the earlier train.bin, val.bin and meta.json are as they were (or absent, as before; "
                 "a pair that the last renames left half replaced, training refuses: re-run)")

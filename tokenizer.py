"""
GPT-2 BPE tokenizer (tiktoken), with an offline path.

Online, `tiktoken.get_encoding("gpt2")` downloads the ranks once and caches them.
Machines without internet point at a local copy of the ranks in tiktoken's own file
format (e.g. the `gpt2.tiktoken` asset shipped with openai-whisper), either by argument
or through the environment variable TUCKER_GPT2_TIKTOKEN:

    export TUCKER_GPT2_TIKTOKEN=/path/to/gpt2.tiktoken

Both paths give the identical encoding ('hello world' -> [31373, 995]).
"""
import base64
import binascii
import functools
import os

import tiktoken

ENV_VAR = "TUCKER_GPT2_TIKTOKEN"
EOT = 50256  # <|endoftext|>, the document separator of GPT-2 training data
VOCAB_SIZE = 50257  # 50,000 merges + 256 byte tokens + <|endoftext|>

# GPT-2's pre-tokenization regex, exactly as in tiktoken_ext/openai_public.py
GPT2_PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@functools.lru_cache(maxsize=None)
def _encoding_from_ranks(path: str) -> tiktoken.Encoding:
    # cached: loading the 50k ranks takes a noticeable fraction of a second
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"GPT-2 ranks file not found: {path} (pass an existing gpt2.tiktoken file, "
            f"or set {ENV_VAR}, or unset it to download via tiktoken)"
        )
    ranks = read_ranks(path)
    if len(ranks) != VOCAB_SIZE - 1 or set(ranks.values()) != set(range(VOCAB_SIZE - 1)):
        raise ValueError(f"{path} is not GPT-2's ranks file: {len(ranks):,} ranks, GPT-2 has ids 0 .. {VOCAB_SIZE - 2:,} "
                         "each once (+ <|endoftext|>)")
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_PAT_STR,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": EOT},
        explicit_n_vocab=VOCAB_SIZE,  # tiktoken checks ranks + specials cover 0..50256
    )


def read_ranks(path: str) -> dict:
    """{token bytes: rank} from a file in tiktoken's format (a line `base64(token) rank` per token), read from the
    file itself: tiktoken.load.load_tiktoken_bpe keeps a copy of any file it reads in its cache folder, keyed by the
    path alone, and then serves that copy even after the file at the path has changed. A line that is not in the
    format is a ValueError naming the file and the line."""
    ranks = {}
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
            except (ValueError, binascii.Error):
                raise ValueError(f"{path}, line {number}: not a `base64(token) rank` line of a tiktoken ranks file: "
                                 f"{line[:60]!r}") from None
    return ranks


def get_gpt2_encoding(ranks_file: str | None = None) -> tiktoken.Encoding:
    """GPT-2 encoding from `ranks_file`, else $TUCKER_GPT2_TIKTOKEN, else tiktoken's download."""
    path = ranks_file or os.environ.get(ENV_VAR)
    if path:
        return _encoding_from_ranks(os.path.abspath(os.path.expanduser(str(path))))
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # typically a network error on an offline machine
        raise RuntimeError(
            f"could not load tiktoken's 'gpt2' encoding ({type(e).__name__}: {e}); "
            f"offline, set {ENV_VAR}=/path/to/gpt2.tiktoken"
        ) from e


# -----------------------------------------------------------------------------
# Tokenizing many documents in a process pool (data/*/prepare.py): each worker builds the encoding
# once (the initializer), then turns lists of documents into one uint16 array each.

_worker_encoding = None


def init_worker(ranks_file=None) -> None:
    """Pool initializer (also called in-process when there is no pool): the worker's encoding. In a pool's worker
    SIGTERM is put back to its default (the prepare scripts turn it into KeyboardInterrupt in their own process,
    for their clean-up; a worker that pool.terminate() stops must just end)."""
    global _worker_encoding
    import multiprocessing
    import signal

    if multiprocessing.parent_process() is not None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _worker_encoding = get_gpt2_encoding(ranks_file)


def encode_documents(docs):
    """Documents -> one uint16 array: each document's tokens (encode_ordinary) followed by EOT."""
    import numpy as np  # only the data preparation needs numpy here

    ids = []
    for doc in docs:
        ids.extend(_worker_encoding.encode_ordinary(doc))
        ids.append(EOT)
    return np.array(ids, dtype=np.uint16)  # vocab 50257 < 2**16: lossless

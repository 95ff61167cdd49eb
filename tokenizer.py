"""
GPT-2 BPE tokenizer (tiktoken), with an offline path.

Online, `tiktoken.get_encoding("gpt2")` downloads the ranks once and caches them.
Machines without internet point at a local copy of the ranks in tiktoken's own file
format (e.g. the `gpt2.tiktoken` asset shipped with openai-whisper), either by argument
or through the environment variable TUCKER_GPT2_TIKTOKEN:

    export TUCKER_GPT2_TIKTOKEN=/path/to/gpt2.tiktoken

Both paths give the identical encoding ('hello world' -> [31373, 995]).
"""
import functools
import os

import tiktoken
import tiktoken.load

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
    ranks = tiktoken.load.load_tiktoken_bpe(path)
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_PAT_STR,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": EOT},
        explicit_n_vocab=VOCAB_SIZE,  # tiktoken checks ranks + specials cover 0..50256
    )


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
    """Pool initializer (also called in-process when there is no pool): the worker's encoding."""
    global _worker_encoding
    _worker_encoding = get_gpt2_encoding(ranks_file)


def encode_documents(docs):
    """Documents -> one uint16 array: each document's tokens (encode_ordinary) followed by EOT."""
    import numpy as np  # only the data preparation needs numpy here

    ids = []
    for doc in docs:
        ids.extend(_worker_encoding.encode_ordinary(doc))
        ids.append(EOT)
    return np.array(ids, dtype=np.uint16)  # vocab 50257 < 2**16: lossless

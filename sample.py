"""
Sample from a trained checkpoint with the variant's own KV cache.

    python sample.py --out_dir=out-shakespeare-tucker --start="ROMEO:" --num_samples=3
    python sample.py --out_dir=out-shakespeare-tucker --start=FILE:prompt.txt --temperature=0
    python sample.py --out_dir=out-shakespeare-tucker --num_samples=32 --batch_size=32   # 32 samples in one batch

The model is rebuilt from the checkpoint alone (its stored GPTConfig). temperature=0 is greedy.
Every variant decodes with its compressed cache (prefill once, then one token per step; MLA in
its absorbed form). The samples go to stdout, the decode speed (tokens/s) to stderr.
"""

import os
import sys
import time
from contextlib import nullcontext

import torch

from checkpoint import NoCheckpointWritten, load_model
from configurator import check_device, default_dtype, help_requested, make_current, parse_config
from model import NonFiniteLogits, check_compile_mode, check_decode
from tokenizer import get_gpt2_encoding

DEFAULTS = dict(
    out_dir="out",  # folder holding ckpt.pt (written by train.py)
    ckpt="ckpt.pt",  # checkpoint file name inside out_dir
    start="\n",  # prompt text, or FILE:path to read it from a file
    num_samples=3,  # samples to draw (>= 1)
    # samples decoded together, as the rows of one batch (>= 1; 1 = one after another, as nanoGPT). A step reads
    # the weights once for all rows: on an H200 with 4k cached tokens a step of 32 rows takes 2.3x (Tucker
    # [8,64,64]) to 6.0x (MHA) the time of one row's (results/bench, session 27; decode='mega': at most 32 rows).
    # The rows draw from one generator, so a sample's text depends on batch_size
    batch_size=1,
    max_new_tokens=200,  # tokens generated per sample (>= 1)
    # print each sample up to its first generated <|endoftext|>, GPT-2's separator between documents (an OpenWebText
    # model goes on with an unrelated document after it); decoding still runs max_new_tokens (one captured graph)
    stop_at_eot=False,
    temperature=0.8,  # >= 0: 1.0 = the model's distribution, < 1 sharper, 0 = greedy
    top_k=200,  # keep only the top_k most likely tokens (0 = all)
    seed=1337,
    device="",  # '' = cuda if available else cpu
    dtype="",  # '' = bfloat16 on a GPU that has it, else float32
    use_cache=True,  # False: recompute the whole context every token (for checking the cache)
    # 'auto' = the static (CUDA-graph) decode step on CUDA, eager elsewhere; 'eager' = the plain
    # cached step; 'graph' = force the static step (CUDA only); 'mega' = the whole step as one persistent kernel
    # (decode_mega, decode_wide above 4 samples; CUDA only, MHA/GQA/MQA/MLA/Tucker, learned positions or RoPE (not
    # MLA's decoupled RoPE): on an H200 the fastest for GQA, MQA and Tucker at batch_size 1 and 32 (MQA and Tucker
    # [8,64,64] at 2 too), slower than 'auto' at 3-4 (results/bench, session 55); its logits vary in their last
    # bits run to run, so greedy text may differ at near ties)
    decode="auto",
    # torch.compile the cached decode step first: the glue between its kernels; the uncompiled step already fuses
    # its cache writes, RoPE, norms, activations and residual adds into its attention and matmul kernels (those
    # stay as they are when compiled), so at batch 1 compiling buys little (results/bench/, session 8), after a
    # one-time compile of tens of seconds (the same greedy tokens in float32: tested on CPU)
    compile=False,
    # with compile=True: 'default', or 'max-autotune' (Triton GEMMs for the matmuls decode_linear does not serve,
    # larger batches; minutes of tuning the first time)
    compile_mode="default",
    tokenizer="",  # GPT-2 ranks file for offline use (else env TUCKER_GPT2_TIKTOKEN, else tiktoken 'gpt2')
)
DTYPE_CHOICES = ("float32", "bfloat16", "float16")


def fail(msg: str):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def validate(cfg: dict) -> torch.device:
    """The device, after checking every key; ValueError naming the key and the allowed values."""
    if not cfg["temperature"] >= 0:
        raise ValueError(f"temperature={cfg['temperature']} is out of range: allowed >= 0 (0 = greedy)")
    if cfg["top_k"] < 0:
        raise ValueError(f"top_k={cfg['top_k']} is out of range: allowed >= 0 (0 = all tokens)")
    for key in ("num_samples", "max_new_tokens", "batch_size"):
        if cfg[key] < 1:
            raise ValueError(f"{key}={cfg[key]} is out of range: allowed >= 1")
    if cfg["decode"] == "mega":
        from decode_wide import MAX_ROWS  # the most rows the one-launch step serves (decode_mega's step below it)
        if min(cfg["batch_size"], cfg["num_samples"]) > MAX_ROWS:  # the rows decoded at once
            raise ValueError(f"batch_size={cfg['batch_size']} is out of range for decode='mega' with num_samples="
                             f"{cfg['num_samples']}: allowed 1 .. {MAX_ROWS} (the one-launch step's rows), or "
                             "another decode mode")
    if cfg["decode"] == "mega" and cfg["dtype"] == "float16":
        raise ValueError("decode='mega' computes in the weights' dtype, and dtype='float16' is autocast over float32 "
                         "weights: use dtype='bfloat16' (cast weights) or 'float32'")
    if cfg["dtype"] and cfg["dtype"] not in DTYPE_CHOICES:
        raise ValueError(f"dtype={cfg['dtype']!r} is unknown: allowed {', '.join(map(repr, DTYPE_CHOICES))}")
    if not 0 <= cfg["seed"] < 2**63:
        raise ValueError(f"seed={cfg['seed']} is out of range: allowed 0 .. 2**63 - 1")
    device = torch.device(check_device(cfg["device"]))
    if cfg["compile"] and not cfg["use_cache"]:
        raise ValueError("compile=True compiles the cached decode step: it needs use_cache=True")
    check_compile_mode(cfg["compile_mode"])
    if cfg["compile_mode"] != "default" and not cfg["compile"]:
        raise ValueError(f"compile_mode={cfg['compile_mode']!r} is a mode of the compiled step: it needs compile=True")
    check_decode(cfg["decode"], device, cfg["compile"], cfg["use_cache"])  # generate's own check, before any loading
    return device


def main(argv):
    try:
        cfg = parse_config(argv, DEFAULTS)
        device = validate(cfg)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    make_current(device)  # cuda:N: the current device, where Triton launches its kernels and graphs capture
    dtype = cfg["dtype"] or default_dtype(device)
    start = cfg["start"]
    if start.startswith("FILE:"):
        path = os.path.expanduser(start[len("FILE:"):])  # the shell leaves a ~ after FILE: as it is
        if not path:
            fail("--start=FILE: names no file: give --start=FILE:path")
        if not os.path.exists(path):
            fail(f"prompt file {path} not found")
        if os.path.isdir(path):
            fail(f"prompt file {path} is a folder: give a text file (--start=FILE:path)")
        try:
            with open(path, encoding="utf-8-sig") as f:  # a leading byte-order mark (some editors write one) dropped
                start = f.read()
        except UnicodeDecodeError as e:  # its offset counts from after a byte-order mark: from the file's start here
            with open(path, "rb") as f:
                mark = 3 if f.read(3) == b"\xef\xbb\xbf" else 0
            fail(f"prompt file {path} is not UTF-8 text ({e.reason} at byte {e.start + mark})")
    try:
        model = load_model(cfg["out_dir"], cfg["ckpt"], device)
    except NoCheckpointWritten as e:  # the run was trained: the message says how to get a checkpoint
        fail(str(e))
    except FileNotFoundError as e:
        fail(f"{e}: train one first (python train.py ... --out_dir={cfg['out_dir']})")
    except ValueError as e:
        fail(str(e))
    try:
        enc = get_gpt2_encoding(cfg["tokenizer"] or None)
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        fail(str(e))
    prompt = enc.encode(start, allowed_special={"<|endoftext|>"})
    if not prompt:
        fail("the prompt is empty: give --start=TEXT (at least one token)")
    if max(prompt) >= model.config.vocab_size:
        fail(f"the prompt holds token id {max(prompt)}, the model's vocab_size is {model.config.vocab_size}: "
             "give a prompt in the model's vocabulary")
    block = model.config.block_size
    if len(prompt) > block:
        fail(f"the prompt is {len(prompt)} tokens, the model's context is block_size={block}: shorten it")
    torch.manual_seed(cfg["seed"])
    gen = torch.Generator(device=device).manual_seed(cfg["seed"])
    if dtype == "bfloat16":
        # inference only: bf16 weights halve the bytes a decode step reads and spare the per-step
        # fp32 -> bf16 weight casts autocast would do (also inside a captured graph)
        model = model.to(torch.bfloat16)
        ctx = nullcontext()
    else:
        model = model.float()  # float32 weights (a checkpoint saved in bf16 too), autocast for float16
        ctx = torch.autocast(device_type=device.type, dtype=getattr(torch, dtype)) if dtype != "float32" else nullcontext()
    rows = min(cfg["batch_size"], cfg["num_samples"])  # every call this many: one decoder, one captured graph
    if cfg["decode"] == "mega":  # whether the one-launch step serves this checkpoint is known only now, from its model:
        from decode_mega import unsupported  # ask here, not as a ValueError traceback from inside generate

        why = unsupported(model, rows)
        if why:
            fail(f"decode='mega' cannot serve this checkpoint's model: {why}; use decode='auto' or 'eager'")
    x = torch.tensor(prompt, dtype=torch.long, device=device)[None, :]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)  # time the GPU's work, not its queue
    samples, times = [], []
    with torch.no_grad(), ctx:
        while len(samples) < cfg["num_samples"]:
            sync()
            t0 = time.perf_counter()
            try:
                y = model.generate(x.expand(rows, -1), cfg["max_new_tokens"], temperature=cfg["temperature"],
                                   top_k=cfg["top_k"] or None, use_cache=cfg["use_cache"], generator=gen,
                                   decode=cfg["decode"], compile=cfg["compile"], compile_mode=cfg["compile_mode"],
                                   vocab_limit=min(enc.n_vocab, model.config.vocab_size))  # no padding ids: not text
            except NonFiniteLogits as e:  # a broken checkpoint (nan weights): one line, not a traceback
                fail(f"{e} (checkpoint {os.path.join(cfg['out_dir'], cfg['ckpt'])})")
            except ValueError as e:  # the one-launch step's own refusal, known once it is built on this GPU (e.g.
                if cfg["decode"] != "mega":  # a program's shared memory beyond what the GPU gives one: decode_wide)
                    raise
                fail(f"decode='mega' cannot serve this checkpoint's model here: {e}; use decode='auto' or 'eager'")
            sync()
            times.append(time.perf_counter() - t0)
            for row in y[:cfg["num_samples"] - len(samples)]:  # (rows, prompt + max_new_tokens); the last call's extras dropped
                tokens = row.tolist()
                if cfg["stop_at_eot"] and enc.eot_token in tokens[len(prompt):]:  # a prompt's own EOTs stay
                    tokens = tokens[:tokens.index(enc.eot_token, len(prompt))]
                text = enc.decode(tokens)
                samples.append(text)
                print(text)
                print("---------------")
    # every decoded row counts, the last call's extra rows too (decoded and timed, not printed)
    n, seconds = len(times) * rows * cfg["max_new_tokens"], sum(times)
    compiled = f", compiled ({cfg['compile_mode']})" if cfg["compile"] else ""
    mode = f"decode={cfg['decode']}{compiled}" if cfg["use_cache"] else "uncached"
    batch = f", batch_size {rows}" if rows > 1 else ""  # the batch decoded: at most num_samples
    extra = len(times) * rows - cfg["num_samples"]
    extra = f"; {extra} extra row(s) of the last batch decoded, not printed" if extra else ""
    print(f"sampled {n} tokens in {seconds:.2f} s: {n / max(seconds, 1e-9):,.1f} tokens/s ({mode}, {device} {dtype}"
          f"{batch}{extra})", file=sys.stderr)
    if len(times) > 1:  # the first call also pays the one-time kernel compile and graph capture
        first = "sample" if rows == 1 else f"batch of {rows}"
        rest_tokens, rest = n - rows * cfg["max_new_tokens"], sum(times[1:])
        print(f"after the first {first}: {rest_tokens} tokens in {rest:.2f} s: "
              f"{rest_tokens / max(rest, 1e-9):,.1f} tokens/s", file=sys.stderr)
    return samples


if __name__ == "__main__":
    if help_requested(sys.argv[1:], __doc__, DEFAULTS):
        sys.exit(0)
    main(sys.argv[1:])

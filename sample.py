"""
Sample from a trained checkpoint with the variant's own KV cache.

    python sample.py --out_dir=out-shakespeare-tucker --start="ROMEO:" --num_samples=3
    python sample.py --out_dir=out-shakespeare-tucker --start=FILE:prompt.txt --temperature=0

The model is rebuilt from the checkpoint alone (its stored GPTConfig). temperature=0 is greedy.
MLA runs its fused (absorbed) inference path; every variant decodes with its compressed cache
(prefill once, then one token per step).
"""

import os
import sys
from contextlib import nullcontext

import torch

from configurator import parse_config
from model import GPT, GPTConfig, LatentAttention
from tokenizer import get_gpt2_encoding

DEFAULTS = dict(
    out_dir="out",  # folder holding ckpt.pt (written by train.py)
    ckpt="ckpt.pt",  # checkpoint file name inside out_dir
    start="\n",  # prompt text, or FILE:path to read it from a file
    num_samples=3,  # samples to draw
    max_new_tokens=200,  # tokens generated per sample
    temperature=0.8,  # 1.0 = the model's distribution, < 1 sharper, 0 = greedy
    top_k=200,  # keep only the top_k most likely tokens (0 = all)
    seed=1337,
    device="",  # '' = cuda if available else cpu
    dtype="",  # '' = bfloat16 on a GPU that has it, else float32
    use_cache=True,  # False: recompute the whole context every token (for checking the cache)
    mla_fused=True,  # MLA: absorbed inference path (W_UK into the query, W_UV into the output)
    tokenizer="",  # GPT-2 ranks file for offline use (else env TUCKER_GPT2_TIKTOKEN, else tiktoken 'gpt2')
)


def fail(msg: str):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def load_checkpoint(path: str):
    """(model, checkpoint dict) from a ckpt.pt path or an out_dir holding one; the model is rebuilt
    from the checkpoint's own GPTConfig, in the dtype it was saved in."""
    path = os.path.join(path, "ckpt.pt") if os.path.isdir(path) else path
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    state = {k.removeprefix("_orig_mod."): v for k, v in checkpoint["model"].items()}
    model = GPT(GPTConfig.from_dict(checkpoint["model_config"])).to(next(iter(state.values())).dtype)
    model.load_state_dict(state)
    return model.eval(), checkpoint


def load_model(out_dir: str, ckpt: str = "ckpt.pt", device="cpu") -> GPT:
    path = os.path.join(out_dir, ckpt)
    if not os.path.exists(path):
        fail(f"no checkpoint at {path}: train one first (python train.py ... --out_dir={out_dir})")
    return load_checkpoint(path)[0].to(device)


def main(argv):
    try:
        cfg = parse_config(argv, DEFAULTS)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    device = torch.device(cfg["device"] or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = cfg["dtype"] or ("bfloat16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32")
    if dtype not in ("float32", "bfloat16", "float16"):
        fail(f"dtype={dtype!r} is unknown: allowed 'float32', 'bfloat16', 'float16'")
    start = cfg["start"]
    if start.startswith("FILE:"):
        path = start[len("FILE:"):]
        if not os.path.exists(path):
            fail(f"prompt file {path} not found")
        with open(path, encoding="utf-8") as f:
            start = f.read()
    model = load_model(cfg["out_dir"], cfg["ckpt"], device)
    try:
        enc = get_gpt2_encoding(cfg["tokenizer"] or None)
    except (FileNotFoundError, RuntimeError) as e:
        fail(str(e))
    if cfg["mla_fused"]:
        for block in model.transformer.h:
            if isinstance(block.attn, LatentAttention):
                block.attn.fused = True
    prompt = enc.encode(start, allowed_special={"<|endoftext|>"})
    if not prompt:
        fail("the prompt is empty: give --start=TEXT (at least one token)")
    block = model.config.block_size
    if len(prompt) >= block:
        fail(f"the prompt is {len(prompt)} tokens, the model's context is block_size={block}: shorten it")
    torch.manual_seed(cfg["seed"])
    gen = torch.Generator(device=device).manual_seed(cfg["seed"])
    ctx = (torch.autocast(device_type=device.type, dtype=getattr(torch, dtype)) if dtype != "float32" else nullcontext())
    x = torch.tensor(prompt, dtype=torch.long, device=device)[None, :]
    samples = []
    with torch.no_grad(), ctx:
        for _ in range(cfg["num_samples"]):
            y = model.generate(x, cfg["max_new_tokens"], temperature=cfg["temperature"],
                               top_k=cfg["top_k"] or None, use_cache=cfg["use_cache"], generator=gen)
            text = enc.decode(y[0].tolist())
            samples.append(text)
            print(text)
            print("---------------")
    return samples


if __name__ == "__main__":
    main(sys.argv[1:])

"""Helpers shared by the model tests: a tiny GPT with attention weights scaled up (so attention is far
from uniform and every term of an equivalence matters numerically), token batches, relative error."""
import torch

from model import GPT, GPTConfig

TINY = dict(n_layer=2, n_head=4, n_embd=32, block_size=24, vocab_size=61, bias=False)


def make(overrides=None, dtype=torch.float64, seed=0, **extra):
    """A tiny GPT (TINY + overrides + extra), attention weights x3, in eval mode."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**{**TINY, **(overrides or {"attn": "mha"}), **extra})).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".attn." in name:
                p.mul_(3.0)
    return model.eval()


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


def tokens(B=2, T=TINY["block_size"], seed=1):
    return torch.randint(0, TINY["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed))

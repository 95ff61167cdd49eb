"""
One GPT with every attention of the Tucker Attention paper: MHA, GQA/MQA, MLA and Tucker.

Notation follows the paper: d = n_embd, nH = n_head, dH = d / nH, sequence length N.
Every attention class has the same signature

    forward(x, rope, cache=None) -> y      x, y: (B, N, d); rope: the (cos, sin) tables or None

x's tokens sit at positions cache.pos .. cache.pos + N - 1 (0 .. N - 1 without a cache).

and `ATTENTION[config.attn]` picks the class. The pieces, top to bottom:

    GPTConfig                  one flat, validated dataclass (every field commented)
    RoPE helpers               rope_cache(), apply_rope()
    LayerCache                 a static KV cache of named tensors (what each variant stores)
    GroupedQueryAttention      MHA, GQA, MQA             (attn='mha' | 'gqa')
    LatentAttention            MLA, decoupled or latent RoPE, unfused / fused (attn='mla')
    TuckerAttention            Tucker, latent RoPE        (attn='tucker')
    LayerNorm, RMSNorm         the norms                  (norm='layernorm' | 'rmsnorm')
    MLP, SwiGLU                the MLPs                   (mlp='gelu' | 'swiglu')
    Block, GPT                 forward, KV-cache decoding, generate, optimizer, MFU, accounting

The defaults build GPT-2 (LayerNorm, 4d GELU MLP, learned positions, tied embeddings); the
paper's LLaMA-3 1B is norm='rmsnorm', mlp='swiglu', pos_emb='rope', rope_theta=5e5 around the
same attention classes (config/owt2_llama1b_base.py).

Nothing happens at import time: no tensors are allocated until a module is built.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import sys
from contextlib import nullcontext
from dataclasses import asdict, dataclass, fields
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.utils.checkpoint
from torch.nn import functional as F

ATTN_CHOICES = ("mha", "gqa", "mla", "tucker")
POS_CHOICES = ("learned", "sinusoidal", "rope")
MLA_ROPE_CHOICES = ("decoupled", "latent")
LOSS_HEAD_CHOICES = ("fused", "logits")
NORM_CHOICES = ("layernorm", "rmsnorm")
MLP_CHOICES = ("gelu", "swiglu")
GELU_CHOICES = ("auto", "torch")
MLA_ROPE_KERNELS_CHOICES = ("auto", "torch")
# GPTConfig's keys that say how the model is computed, not what it is: the same weights give the same function, to
# rounding, whatever they are. A resumed run may change them (train.py: e.g. activation checkpointing for a run that
# ran out of memory), and runs that differ only in them compute one experiment (scripts/compare_runs.py)
COMPUTE_KEYS = ("mla_rope_kernels", "gelu", "activation_checkpointing", "loss_head", "loss_chunk_tokens")


# ----------------------------------------------------------------------------------------
# Configuration


@dataclass
class GPTConfig:
    """Every key of the model (one comment a field). Two are filled in when left None: tucker_ranks_post (= the
    pre-softmax ranks) and MLA's decoupled rope_head_dim (= dH / 2). dataclasses.replace keeps their filled values:
    changing tucker_ranks, n_embd or n_head that way, give them again (or None, to fill them anew)."""
    # --- GPT-2 shapes (defaults: GPT-2 124M) ---
    block_size: int = 1024  # context length N the model is built for (learned positions, RoPE table)
    vocab_size: int = 50304  # GPT-2's 50257 tokens padded up to a multiple of 64 for fast matmuls
    n_layer: int = 12  # transformer blocks
    n_head: int = 12  # query heads nH
    n_embd: int = 768  # model width d; head dim dH = n_embd // n_head
    dropout: float = 0.0  # dropout on embeddings, attention probabilities and residual branches
    bias: bool = True  # biases in Linear layers and LayerNorms (GPT-2: True; the paper's runs: False)
    # --- which attention ---
    attn: str = "mha"  # 'mha' | 'gqa' | 'mla' | 'tucker' (MQA is 'gqa' with n_kv_head=1)
    # GQA: number of key/value heads nG; n_head must be a multiple of it. MHA: None (= n_head).
    n_kv_head: Optional[int] = None
    # MLA: query latent rank dcQ; None = a full d x d query (the paper's "MLA [GQA equiv.]" row)
    q_rank: Optional[int] = None
    # MLA: key/value latent rank dcK (the KV cache holds this latent); required for attn='mla'
    kv_rank: Optional[int] = None
    # MLA/Tucker: one down-projection for keys and values (MLA W_DKV; Tucker U~3 = U3)
    shared_kv: bool = False
    # Tucker: pre-softmax ranks (r1, r2, r3) = (head, query, key); required for attn='tucker'
    tucker_ranks: Optional[Tuple[int, int, int]] = None
    # Tucker: post-softmax ranks (r~1, r~2, r~3) = (head, output, value); None = tucker_ranks
    tucker_ranks_post: Optional[Tuple[int, int, int]] = None
    # --- positions ---
    # 'learned' absolute embedding (nanoGPT's, which the paper builds on: our "w/o RoPE" rows) | 'sinusoidal' (the
    # fixed cosine table of Vaswani et al., added where the learned one is: the paper's wording for "w/o RoPE") | 'rope'
    pos_emb: str = "learned"
    # MLA with RoPE: 'decoupled' (DeepSeek-V2: extra rotary query dims per head and one shared
    # rotary key) or 'latent' (rotation inside the dcK latent, the paper's eq. eq_mla_coupled_rope)
    mla_rope: str = "decoupled"
    # decoupled RoPE: rotary dims per query head and of the shared rotary key; None = dH // 2
    rope_head_dim: Optional[int] = None
    rope_theta: float = 10000.0  # RoPE base: frequency of pair i is rope_theta ** (-2i / dim)
    # how MLA's decoupled RoPE builds SDPA's query [q_i | R q^R_i] and key [k_i | R k^R] in training and prefill:
    # 'auto' = fused_mla_rope's Triton kernels on CUDA (the key straight from the latent, the query rotated in place;
    # torch ops elsewhere); 'torch' = apply_rope, cat and k_up's matmul everywhere (inductor's kernels when compiled).
    # The same values to rounding (tests/test_fused_mla_rope.py); 'torch' is the plain reference of a loss curve
    mla_rope_kernels: str = "auto"
    # --- the rest of the block (defaults: GPT-2; the paper's LLaMA-3 1B: rmsnorm, swiglu) ---
    norm: str = "layernorm"  # 'layernorm' (GPT-2; bias follows `bias`) | 'rmsnorm' (LLaMA: weight only)
    norm_eps: float = 1e-5  # epsilon of every norm (LayerNorm and RMSNorm)
    mlp: str = "gelu"  # 'gelu' (GPT-2: d -> hidden -> d with GELU) | 'swiglu' (LLaMA: w2(silu(w1 x) * w3 x))
    # MLP hidden width; None = 4 d for gelu, and for swiglu LLaMA's rule int(8 d / 3) rounded up to a
    # multiple of mlp_multiple_of (d=2048 -> 5632). An explicit value is used as given (LLaMA-3 1B: 8192).
    mlp_hidden: Optional[int] = None
    mlp_multiple_of: int = 256  # swiglu's default hidden width is rounded up to a multiple of this
    # the exact GELU's implementation (mlp='gelu'): 'auto' = fused_gelu's Triton kernels on CUDA (Phi through erfcx,
    # one exp2, at the copy rate; F.gelu's erf form is compute-bound there) and F.gelu elsewhere; 'torch' = F.gelu
    # everywhere (inductor's kernels when compiled). The same function within float32's error: bf16 outputs
    # correctly rounded (tests/test_fused_gelu.py, on the CPU's interpreter and on the GPU)
    gelu: str = "auto"
    tie_embeddings: bool = True  # lm_head shares wte's weight (GPT-2 and LLaMA-3 1B); False: separate lm_head
    # --- memory ---
    # recompute each block's activations in the backward instead of storing them (training only):
    # less memory for long sequences / big models (the LLaMA-3 1B rows at N=4096), ~1/3 more compute
    activation_checkpointing: bool = False
    # --- the loss head (lm_head + cross-entropy), when forward gets targets ---
    # 'fused': with gradients on (training), the loss's gradients are computed in the forward
    # (LinearCrossEntropy: one pass over the logits takes each row's loss and softmax - onehot, a Triton
    # kernel on CUDA), the logits are never kept for the backward, and forward returns logits=None with
    # the loss; without gradients (evaluation) it returns the logits and the loss. 'logits': nanoGPT's
    # head, the (B, T, vocab) logits returned with the loss and differentiable, the loss's backward
    # recomputed from them (LogitsCrossEntropy). Same loss and gradients up to float rounding (tested)
    loss_head: str = "fused"
    # the fused head in chunks of this many tokens, so that logits exist for one chunk at a time, never
    # for the whole (B*T, vocab); forward then returns logits=None with the loss, evaluation included.
    # 0: all tokens at once (the fastest; needs loss_head='fused' when > 0)
    loss_chunk_tokens: int = 0

    def __post_init__(self):
        # Tuples arrive as lists from JSON checkpoints and as strings from nowhere: normalize.
        for name in ("tucker_ranks", "tucker_ranks_post"):
            value = getattr(self, name)
            if value is not None:
                if not isinstance(value, (tuple, list)) or len(value) != 3:
                    raise ValueError(f"{name} must be three integers (head, query/output, key/value ranks), got {value!r}")
                setattr(self, name, tuple(value))
        self._validate()
        if self.attn == "tucker" and self.tucker_ranks_post is None:
            self.tucker_ranks_post = self.tucker_ranks
        if self.attn == "mla" and self.pos_emb == "rope" and self.mla_rope == "decoupled" and self.rope_head_dim is None:
            self.rope_head_dim = (self.n_embd // self.n_head) // 2

    # Every check names the key and the allowed values; nothing is left to a shape error in forward.
    def _validate(self):
        def need_int(name, value, lo, hi=None):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
            if value < lo or (hi is not None and value > hi):
                allowed = f"{lo}..{hi}" if hi is not None else f">= {lo}"
                raise ValueError(f"{name}={value} is out of range: allowed {allowed}")

        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd"):
            need_int(name, getattr(self, name), 1)
        need_int("loss_chunk_tokens", self.loss_chunk_tokens, 0)
        if self.loss_head not in LOSS_HEAD_CHOICES:
            raise ValueError(f"loss_head={self.loss_head!r} is unknown: allowed {LOSS_HEAD_CHOICES}")
        if self.loss_head != "fused" and self.loss_chunk_tokens > 0:
            raise ValueError(f"loss_chunk_tokens={self.loss_chunk_tokens} needs loss_head='fused' (got {self.loss_head!r})")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd={self.n_embd} must be a multiple of n_head={self.n_head}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout!r} is out of range: allowed a number in [0, 1)")
        if self.attn not in ATTN_CHOICES:
            raise ValueError(f"attn={self.attn!r} is unknown: allowed {ATTN_CHOICES}")
        if self.pos_emb not in POS_CHOICES:
            raise ValueError(f"pos_emb={self.pos_emb!r} is unknown: allowed {POS_CHOICES}")
        if self.mla_rope not in MLA_ROPE_CHOICES:
            raise ValueError(f"mla_rope={self.mla_rope!r} is unknown: allowed {MLA_ROPE_CHOICES}")
        # at most the largest float, not below inf: an int beyond it (10**400) compares below inf, yet no float holds it
        # (rope_cache's table raised OverflowError in GPT(), past the config's check)
        if isinstance(self.rope_theta, bool) or not (isinstance(self.rope_theta, (int, float)) and
                                                     0 < self.rope_theta <= sys.float_info.max):
            raise ValueError(f"rope_theta={self.rope_theta!r} must be a positive finite number")
        # so small that 1 / rope_theta overflows (5e-324): rope_cache's frequencies (<= max(1, 1 / rope_theta)) times the
        # positions (< block_size) would be inf, and its cos / sin tables nan
        if not math.isfinite(self.block_size / self.rope_theta):
            raise ValueError(f"rope_theta={self.rope_theta!r} is too small: block_size / rope_theta overflows, so RoPE's "
                             f"angles would be inf and its tables nan; allowed a positive number with block_size="
                             f"{self.block_size} / rope_theta finite (the usual bases are 1e4-5e5)")
        if self.norm not in NORM_CHOICES:
            raise ValueError(f"norm={self.norm!r} is unknown: allowed {NORM_CHOICES}")
        if isinstance(self.norm_eps, bool) or not (isinstance(self.norm_eps, (int, float)) and 0 < self.norm_eps < 1):
            raise ValueError(f"norm_eps={self.norm_eps!r} is out of range: allowed a number in (0, 1)")
        if self.mlp not in MLP_CHOICES:
            raise ValueError(f"mlp={self.mlp!r} is unknown: allowed {MLP_CHOICES}")
        if self.gelu not in GELU_CHOICES:
            raise ValueError(f"gelu={self.gelu!r} is unknown: allowed {GELU_CHOICES}")
        if self.mla_rope_kernels not in MLA_ROPE_KERNELS_CHOICES:
            raise ValueError(f"mla_rope_kernels={self.mla_rope_kernels!r} is unknown: allowed "
                             f"{MLA_ROPE_KERNELS_CHOICES}")
        if self.mlp_hidden is not None:
            need_int("mlp_hidden", self.mlp_hidden, 1)
        need_int("mlp_multiple_of", self.mlp_multiple_of, 1)
        for name in ("bias", "shared_kv", "tie_embeddings", "activation_checkpointing"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")

        d, nH, dH = self.n_embd, self.n_head, self.n_embd // self.n_head
        rope = self.pos_emb == "rope"
        # Keys of one family set for another would never reach the model: refuse them.
        owners = {"n_kv_head": ("gqa", "mha"), "q_rank": ("mla",), "kv_rank": ("mla",),
                  "tucker_ranks": ("tucker",), "tucker_ranks_post": ("tucker",)}
        for key, families in owners.items():
            if getattr(self, key) is not None and self.attn not in families:
                raise ValueError(f"{key}={getattr(self, key)!r} is a key of attn in {families}, but attn={self.attn!r}: "
                                 f"remove it (set by a config file: --{key}=None)")
        if self.shared_kv and self.attn not in ("mla", "tucker"):
            raise ValueError(f"shared_kv=True needs attn='mla' or 'tucker', got attn={self.attn!r}")
        if self.rope_head_dim is not None and not (self.attn == "mla" and rope and self.mla_rope == "decoupled"):
            raise ValueError("rope_head_dim is the size of MLA's decoupled RoPE: it needs attn='mla', "
                             "pos_emb='rope', mla_rope='decoupled'")

        if self.attn == "mha":
            if self.n_kv_head is not None:
                need_int("n_kv_head", self.n_kv_head, 1, nH)
            if self.n_kv_head is not None and self.n_kv_head != nH:
                raise ValueError(f"n_kv_head={self.n_kv_head} with attn='mha' must be None or n_head={nH}; use attn='gqa'")
        if self.attn == "gqa":
            if self.n_kv_head is None:
                raise ValueError("attn='gqa' needs n_kv_head (1 = MQA)")
            need_int("n_kv_head", self.n_kv_head, 1, nH)
            if nH % self.n_kv_head != 0:
                raise ValueError(f"n_head={nH} must be a multiple of n_kv_head={self.n_kv_head}")
        if self.attn in ("mha", "gqa") and rope and dH % 2:
            raise ValueError(f"RoPE rotates pairs: head dim n_embd/n_head={dH} must be even")
        if self.attn == "mla":
            if self.kv_rank is None:
                raise ValueError("attn='mla' needs kv_rank (the KV latent rank dcK)")
            need_int("kv_rank", self.kv_rank, 1, d)
            if self.q_rank is not None:
                need_int("q_rank", self.q_rank, 1, d)
            if rope and self.mla_rope == "latent" and self.kv_rank % 2:
                raise ValueError(f"latent RoPE rotates pairs in the KV latent: kv_rank={self.kv_rank} must be even")
            if rope and self.mla_rope == "decoupled" and self.rope_head_dim is not None:
                need_int("rope_head_dim", self.rope_head_dim, 2, d)
                if self.rope_head_dim % 2:
                    raise ValueError(f"rope_head_dim={self.rope_head_dim} must be even (RoPE rotates pairs)")
            if rope and self.mla_rope == "decoupled" and self.rope_head_dim is None and (dH // 2 < 2 or dH // 2 % 2):
                raise ValueError(f"rope_head_dim=None defaults to half the head dim, n_embd/n_head/2 = {dH // 2}, "
                                 "which is not an even number >= 2 (RoPE rotates pairs): set rope_head_dim to one")
        if self.attn == "tucker":
            if self.tucker_ranks is None:
                raise ValueError("attn='tucker' needs tucker_ranks=(r1, r2, r3)")
            for name in ("tucker_ranks", "tucker_ranks_post"):
                ranks = getattr(self, name)
                if ranks is None:
                    continue
                for mode, (value, size) in enumerate(zip(ranks, (nH, d, d)), start=1):
                    need_int(f"{name}[{mode - 1}] (mode {mode})", value, 1, size)
            r3 = self.tucker_ranks[2]
            if self.shared_kv and self.tucker_ranks_post is not None and self.tucker_ranks_post[2] != r3:
                raise ValueError(f"shared_kv=True shares U3 as U~3: tucker_ranks_post[2]={self.tucker_ranks_post[2]} "
                                 f"must equal tucker_ranks[2]={r3}")
            if rope and r3 % 2:
                raise ValueError(f"latent RoPE rotates pairs in the key latent: tucker_ranks[2]={r3} must be even")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def mlp_hidden_dim(self) -> int:
        """The MLP's hidden width: mlp_hidden if given, else 4 d (gelu) or LLaMA's SwiGLU rule
        int(2 * 4d / 3) rounded up to a multiple of mlp_multiple_of (keeps ~8 d^2 MLP weights)."""
        if self.mlp_hidden is not None:
            return self.mlp_hidden
        if self.mlp == "gelu":
            return 4 * self.n_embd
        m = self.mlp_multiple_of
        return m * -(-int(8 * self.n_embd / 3) // m)

    def inert_keys(self) -> Dict[str, str]:
        """{key: why} for the keys with a default of their own that this configuration never reads (keys whose
        default is None are refused by _validate when set for another family): train.py refuses such a key given
        on its command line with a value other than the default, where it would silently change nothing (gelu and
        mla_rope_kernels, how a part is computed: train.IMPLEMENTATION_KEYS, it only notes)."""
        rope = self.pos_emb == "rope"
        reads = {"mla_rope": (self.attn == "mla" and rope, "only MLA with pos_emb='rope' reads it"),
                 "mla_rope_kernels": (self.attn == "mla" and rope and self.mla_rope == "decoupled",
                                      "only MLA with pos_emb='rope' and mla_rope='decoupled' reads it"),
                 "rope_theta": (rope, "only pos_emb='rope' reads it"),
                 "gelu": (self.mlp == "gelu", "only mlp='gelu' reads it"),
                 "mlp_multiple_of": (self.mlp == "swiglu" and self.mlp_hidden is None,
                                     "only mlp='swiglu' without mlp_hidden reads it (its default hidden width)")}
        return {key: why for key, (read, why) in reads.items() if not read}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# ----------------------------------------------------------------------------------------
# RoPE: one precomputed (cos, sin) table, sliced by position, applied by one function.


def rope_cache(dim: int, max_len: int, theta: float, device=None, dtype=torch.float32):
    """cos, sin of shape (max_len, dim // 2): angle[pos, i] = pos * theta ** (-2 i / dim),
    computed in float64 and returned in `dtype`."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float64) / dim))
    angles = torch.outer(torch.arange(max_len, device=device, dtype=torch.float64), inv_freq)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def sinusoidal_table(n_pos: int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """Vaswani et al.'s fixed position table (n_pos, dim), float32: sin(pos * base ** (-2 i / dim)) in column 2 i,
    the cos of the same angle in column 2 i + 1 (computed in float64)."""
    angles = torch.outer(torch.arange(n_pos, dtype=torch.float64),
                         base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim))  # (n_pos, ceil(dim / 2))
    table = torch.empty(n_pos, dim, dtype=torch.float64)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles[:, :dim // 2].cos()
    return table.float()


def rope_at(rope: Tuple[torch.Tensor, torch.Tensor], start: int, length: int):
    """The (cos, sin) rows of positions start .. start + length - 1 from the full tables."""
    cos, sin = rope
    return cos[start:start + length], sin[start:start + length]


@dataclass
class DecodePosition:
    """What every layer of one decode step shares, computed once per step (not once per layer).
    Everything lives on the device, so a captured CUDA graph replays it for any position."""
    pos: torch.Tensor  # (1,) long: the position of the new token (its cache slot)
    length: torch.Tensor  # (1,) long: pos + 1, the cached positions the new token attends to
    tables: Optional[Tuple[torch.Tensor, torch.Tensor]] = None  # the full (cos, sin) tables (None: no RoPE); the
    #   decode kernel rotates q, new keys and (a shared latent) cached keys from them at pos itself
    dtype: Optional[torch.dtype] = None  # the activation dtype, of rotate()'s rows
    rows: Optional[Tuple[torch.Tensor, torch.Tensor]] = None  # (1, R) [cos | cos], [-sin | sin] at pos, built on
    #   rotate()'s first call (only MLA's decoupled RoPE rotates outside the kernel: other variants never build them)

    @classmethod
    def at(cls, pos: torch.Tensor, rope: Optional[Tuple[torch.Tensor, torch.Tensor]], dtype) -> "DecodePosition":
        return cls(pos=pos, length=pos + 1, tables=rope, dtype=dtype)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """apply_rope(x, cos, sin) at this position, x (..., R): apply_rope_wide with this step's rows."""
        if self.rows is None:
            self.rows = wide_rope_rows(*(t.index_select(0, self.pos).to(self.dtype) for t in self.tables))  # (1, R)
        return apply_rope_wide(x, *self.rows)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[..., i], x[..., i + D/2]) of x (..., N, D) by the angles of cos/sin (N, D/2).

    This is R(n, D) of the paper in the "rotate half" layout (GPT-NeoX / LLaMA); it satisfies
    R(m) R(n)^T = R(m - n), so q_m . k_n depends on m - n only. cos/sin broadcast against x's
    leading dims: (N, 1, D/2) rotates x laid out as (B, N, heads, D) before the head transpose,
    which keeps q and k in the layout SDPA gets without RoPE (no extra copy in the backward).
    """
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def wide_rope_rows(cos: torch.Tensor, sin: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(..., D/2) rows of cos/sin -> the (..., D) rows [cos | cos], [-sin | sin] that apply_rope_wide takes."""
    return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)


def apply_rope_wide(x: torch.Tensor, cos2: torch.Tensor, sin2: torch.Tensor) -> torch.Tensor:
    """apply_rope with full-width rows cos2 = [cos | cos], sin2 = [-sin | sin] (..., D) built beforehand (wide_rope_rows):
    x cos2 + [x2 | x1] sin2 = (x1 cos - x2 sin, x2 cos + x1 sin), the same products and sums. Three kernels
    where apply_rope launches about seven when not compiled, so the decode step uses it, with the rows built
    once per step (DecodePosition); compiled training keeps apply_rope, whose backward inductor fuses better
    (scripts/bench_rope.py: this form, "halfsign", costs twice its RoPE time there)."""
    swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)  # [x2 | x1]
    return torch.addcmul(x * cos2, swapped, sin2)


# ----------------------------------------------------------------------------------------
# KV cache: per layer, one preallocated tensor per named entry, written in place (static shapes).


class LayerCache:
    """What one attention layer keeps per past token, e.g. {'k': (B, nG, L, dH), 'v': ...} for GQA,
    {'kv': (B, 1, L, r3)} for Tucker with shared KV. `append` writes the new tokens at `pos` and
    returns views of everything cached so far; `pos` advances once per forward call."""

    def __init__(self, spec: Dict[str, Tuple[int, int]], batch_size: int, max_len: int, device=None, dtype=None):
        self.max_len = max_len
        self.pos = 0
        self.store = {name: torch.zeros(batch_size, heads, max_len, dim, device=device, dtype=dtype)
                      for name, (heads, dim) in spec.items()}

    def append(self, **new: torch.Tensor) -> Dict[str, torch.Tensor]:
        T = next(iter(new.values())).size(2)
        if self.pos + T > self.max_len:
            raise ValueError(f"KV cache is full: {self.pos} + {T} tokens > max_len={self.max_len}")
        out = {}
        for name, value in new.items():
            buf = self.store[name]
            buf[:, :, self.pos:self.pos + T] = value
            out[name] = buf[:, :, :self.pos + T]
        self.pos += T
        return out

    def write_at(self, pos: torch.Tensor, **new: torch.Tensor) -> None:
        """Decode step: write one token's entries (B, heads, 1, dim) at the position held in the (1,)
        long tensor `pos`, in place (fixed addresses and shapes: a captured CUDA graph replays it).
        Host-side `self.pos` is left alone; the static decoder tracks it."""
        for name, value in new.items():
            self.store[name].index_copy_(2, pos, value.to(self.store[name].dtype))

    def values_per_token(self) -> int:
        return sum(buf.size(1) * buf.size(3) for buf in self.store.values())


def not_traced(fn):
    """torch.compiler.disable(fn), made only when a compile needs it: the decorator itself imports torch._dynamo
    (~1.5 s), which every process that imports model would pay at import time (a CPU run, sample.py's eager path,
    each test's train.py). Called eagerly the wrapper calls fn. disable_opaque_calls, which
    StaticDecoder calls before its compile, puts the disabled functions in the wrappers' places; a trace that
    reaches a wrapper before that makes the disabled function there (correct, at the cost of a graph break and a
    compiled frame of the wrapper)."""
    disabled = None

    def make():
        nonlocal disabled
        if disabled is None:
            disabled = torch.compiler.disable(fn)
        return disabled

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not torch.compiler.is_compiling():  # eager: the function itself
            return fn(*args, **kwargs)
        return make()(*args, **kwargs)
    call.make_disabled = make
    return call


def disable_opaque_calls() -> None:
    """Put each not_traced function's torch.compiler.disable'd version in its wrapper's place, this module's
    functions and its classes' methods (imports Dynamo; what the decorator did at import before): call it before
    torch.compile traces a decode step. Left as wrappers, every opaque call would also compile a frame of its wrapper,
    whose one code object the six share (Dynamo's recompile limit of 8 warns)."""
    namespace = globals()
    for name, obj in list(namespace.items()):
        if callable(getattr(obj, "make_disabled", None)):
            namespace[name] = obj.make_disabled()
        elif isinstance(obj, type) and obj.__module__ == __name__:
            for attr, member in list(vars(obj).items()):
                if callable(getattr(member, "make_disabled", None)):
                    setattr(obj, attr, member.make_disabled())


def exact_math(device: torch.device):
    """Autocast off on `device`: the inference forms (and their merged matrices) are products of the weights
    in the weights' own precision (float32 for bf16 ones), whatever context first asks for them; they are
    cached, and a form built under autocast would carry bf16 rounding into every later decode."""
    return torch.autocast(device.type, enabled=False)


def _fence(device: torch.device) -> None:
    """One small kernel after an inference form's build: decode_linear's kernels (launched with programmatic
    dependent launch) read their weights before they wait for the kernel launched just before them, so that
    kernel must not be the one that wrote a weight."""
    if device.type == "cuda":
        torch.empty(1, device=device).zero_()


# Weight writes that bump no version counter, counted for the whole process: a fused torch optimizer's step (its
# kernel writes through pointers; seen: torch's fused AdamW, train.py's on CUDA, left MLA and Tucker decoding with
# their forms of before the step) and a graph_step replay. GPT.generate compares the count with the one it last
# saw and, when it moved, rebuilds what it keeps from the weights (GPT.note_weight_changes)
_UNTRACKED_WRITES = [0]
_WATCHING_OPTIMIZERS = [False]


def weights_written() -> None:
    """Count a write of weights that bumped no version counter (see _UNTRACKED_WRITES)."""
    _UNTRACKED_WRITES[0] += 1


def _count_fused_step(optimizer, args, kwargs) -> None:
    if any(group.get("fused") for group in optimizer.param_groups):  # foreach and for-loop steps bump the counters
        weights_written()


def watch_fused_optimizers() -> None:
    """Count every fused torch optimizer's step from now on (a post-step hook for all optimizers, registered once
    a process; GPT.__init__ calls it). Cost: a Python check a step."""
    if not _WATCHING_OPTIMIZERS[0]:
        from torch.optim.optimizer import register_optimizer_step_post_hook  # torch.optim does not export it
        register_optimizer_step_post_hook(_count_fused_step)
        _WATCHING_OPTIMIZERS[0] = True


class InferenceForm:
    """Mixin: an attention's inference form (fused/absorbed weights), built once from the current
    weights and rebuilt when any of them changes (an optimizer step, load_state_dict, .to()):
    the key is every parameter's storage address and in-place version counter. Writes that leave the
    counter as it was: a fused optimizer's step and a graph_step replay are counted (weights_written) and
    GPT.generate then bumps every counter; after writes through p.data call GPT.note_weight_changes."""

    @not_traced  # host-side bookkeeping (storage addresses, versions): not traced
    def inference_form(self) -> Dict[str, torch.Tensor]:
        key = tuple((p.data_ptr(), p._version, p.dtype) for p in self.parameters())
        cached = self.__dict__.get("_inference_form")
        if cached is None or cached[0] != key:
            device = next(self.parameters()).device
            with torch.no_grad(), exact_math(device):
                cached = (key, self.build_inference_form())
            _fence(device)
            self.__dict__["_inference_form"] = cached
        return cached[1]

    @not_traced  # host-side bookkeeping, as inference_form
    def merged_form(self) -> Dict[str, torch.Tensor]:
        """The inference form with the merged matrices of merged_decode (build_merged_form) added on first
        use: they live as long as the form, rebuilt with it when a weight changes."""
        form = self.inference_form()
        if "merged" not in form:
            device = next(self.parameters()).device
            with torch.no_grad(), exact_math(device):
                form.update(self.build_merged_form(form), merged=True)
            _fence(device)
        return form


def _cat_linear(layers) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Weights (sum out, in) and biases of nn.Linear layers reading the same input: one matmul."""
    weight = torch.cat([lin.weight for lin in layers], dim=0)
    biases = [lin.bias for lin in layers]
    if all(b is None for b in biases):
        return weight, None
    return weight, torch.cat([b if b is not None else weight.new_zeros(lin.out_features)
                              for lin, b in zip(layers, biases)])


def _stacked_linear(x: torch.Tensor, linears: Sequence[nn.Linear], heads: int = 0):
    """x through several nn.Linear layers that all read it, as ONE matmul with their weights stacked:
    one wide GEMM runs far better than several narrow ones. Returns the outputs split back, in order;
    with heads > 0 the stacked output is interleaved per head instead ([l0 head 0 | l1 head 0 | l0 head 1 | ...],
    each linear's out_features a multiple of heads) and returned whole, (..., heads * sum of per-head widths)."""
    if heads:
        weight = torch.cat([lin.weight.view(heads, -1, lin.in_features) for lin in linears], dim=1).flatten(0, 1)
        bias = (None if linears[0].bias is None else
                torch.cat([lin.bias.view(heads, -1) for lin in linears], dim=1).flatten())
        return F.linear(x, weight, bias)
    weight, bias = _cat_linear(linears)  # (sum of out_features, in_features)
    return F.linear(x, weight, bias).split([lin.out_features for lin in linears], dim=-1)


def _attend(q, k, v, *, scale: float, dropout_p: float, q_start: int) -> torch.Tensor:
    """Causal scaled-dot-product attention over SDPA. q: (B, nH, T, Dq), k/v: (B, nG, S, D) with
    nH a multiple of nG (nG = 1 is MQA-style: one K/V head read for every query head, no copies).
    q_start is the position of q's first token among the S keys (0 without a cache)."""
    T, S = q.size(2), k.size(2)
    gqa = {"enable_gqa": True} if k.size(1) != q.size(1) else {}
    if q_start == 0 and T == S:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale, **gqa)
    if T == 1:  # one new token sees every cached one
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale, **gqa)
    # several new tokens after a cached prefix: query i (at q_start + i) sees keys 0 .. q_start + i
    mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=q_start)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale, **gqa)


@not_traced  # an opaque call in a compiled decode step (a Triton launch, or SDPA)
def decode_attention(q, k, v, length, *, scale, rope=None, rope_keys="as_read", rotate_q=False, new_kv=None,
                     pdl_split=False):
    """One new token per sequence attends to its whole cache buffer (positions 0 .. length - 1):
    decode_attention.decode_attention, the one dispatch point (Triton flash-decoding on CUDA,
    SDPA elsewhere). q (B, nH, Dk), k (B, nG, L, Dk), v (B, nG, L, Dv) -> (B, nH, Dv). new_kv: the new
    token's (key, value or None), written into row length - 1 by the same call; rotate_q / rope_keys: q and
    the new key rotated there too (one launch for the cache write, the rotations and the attention). pdl_split: the
    kernel before is short (its split kernel may then start as that one finishes: programmatic dependent launch)."""
    from decode_attention import decode_attention as dispatch  # imported on first use, not at import
    return dispatch(q, k, v, length, scale=scale, rope=rope, rope_keys=rope_keys, rotate_q=rotate_q, new_kv=new_kv,
                    pdl_split=pdl_split)


@not_traced  # an opaque call in a compiled decode step: its kernel, not inductor's fusion of the ops
def decode_linear(a, weight, bias=None, *, norm=None, act=None, weight2=None, bias2=None, residual=None):
    """[residual +] act(norm(a) @ weight^T + bias): decode_linear.decode_linear, one kernel on CUDA at the rows it
    serves (decode_linear.serves_rows: 1-2, or 3-4 where K <= 1024 or the weight is small, 1 for the LM heads; the
    norm before a decode step's matmul, its bias, activation and residual add fused in), the torch ops elsewhere."""
    from decode_linear import decode_linear as dispatch  # imported on first use, not at import
    return dispatch(a, weight, bias, norm=norm, act=act, weight2=weight2, bias2=bias2, residual=residual)


def decode_linear_serves(rows: int, K: int, N: int) -> bool:
    """Whether a decode step's matmul of `rows` rows of K-wide input into N outputs runs as decode_linear's GEMV
    kernel (where it is available: decode_linear.serves_rows) rather than cuBLAS's GEMM."""
    import decode_linear as module  # imported on first use, not at import
    return module.serves_rows(rows, K, N)


def add_norm(x, delta, norm):
    """(x + delta, norm(x + delta)): fused_norm.add_norm, one kernel on CUDA (the residual add and the norm
    after it), the two torch ops elsewhere and while torch.compile traces."""
    from fused_norm import add_norm as dispatch  # imported on first use, not at import
    return dispatch(x, delta, norm)


Stream = Tuple[torch.Tensor, Optional[torch.Tensor]]  # the decode step's residual stream: (x, pending delta)


@not_traced  # decided and launched outside a compiled step's graph, as decode_linear
def _decode_residual(x, y, weight, bias) -> Stream:
    """The stream x + (y @ weight^T + bias): added in decode_linear's kernel where it serves, else left pending."""
    import decode_linear as module
    if module.decode_linear_backend(y, weight, bias, residual=x) == "triton":
        return module.launch(y, weight, bias, residual=x), None
    return x, F.linear(y, weight, bias)


class DecodeIO:
    """A sublayer's view of the decode step's residual stream and of the norm before the sublayer.

    The stream is a pair (x, delta): x (B, d), delta (B, d) an add still to do, or None. Two ways to fuse the
    step's small kernels, chosen per call by decode_linear_backend (the batch and the matmul's shape, K and N x K,
    decide: its kernel serves a few rows, decode_linear.serves_rows, cuBLAS more): with decode_linear's kernel the
    norm is taken inside the matmul after it and the residual add inside the output projection before it (delta
    stays None); with cuBLAS matmuls the residual add is left pending and done with the next norm in one kernel
    (fused_norm.add_norm). Sublayers return the new stream, x + sublayer(norm(x)), from `residual`."""

    def __init__(self, stream: Stream, norm: nn.Module):
        (self.x, self.delta), self.norm = stream, norm
        self._normed = None

    def normed(self) -> torch.Tensor:
        """norm(x + delta) (B, d), the pending add done in the same kernel (and kept: x is then the sum)."""
        if self._normed is None:
            if self.delta is not None:
                self.x, self._normed = add_norm(self.x, self.delta, self.norm)
                self.delta = None
            else:
                self._normed = self.norm(self.x)
        return self._normed

    def project(self, weight, bias=None, act=None, weight2=None, bias2=None) -> torch.Tensor:
        """act(norm(x + delta) @ weight^T + bias) (B, N); weight (N, d), F.linear's."""
        if self.delta is None and self._normed is None:  # the norm inside the matmul (or the torch ops)
            return decode_linear(self.x, weight, bias, norm=self.norm, act=act, weight2=weight2, bias2=bias2)
        return decode_linear(self.normed(), weight, bias, act=act, weight2=weight2, bias2=bias2)

    def residual(self, y, weight, bias=None) -> Stream:
        """The new stream x + (y @ weight^T + bias): y (B, K), weight (d, K). The add happens in the matmul's
        kernel where decode_linear's serves, else it is left pending for the next norm."""
        return _decode_residual(self.x if self.delta is None else self.x + self.delta, y, weight, bias)

    def add(self, y) -> Stream:
        """The new stream x + y (pending)."""
        return (self.x, y) if self.delta is None else (self.x + self.delta, y)


@not_traced
def tucker_decode_attention(q_lat, G, k, v, G_post, length, *, scale, rope=None, q_pos=None):
    """Tucker's decode attention with the per-head cores fused (decode_attention.tucker_decode_attention):
    q_lat (B, r2), G (nH, r2, r3), k (B, 1, L, r3), v (B, 1, L, r~3), G_post (nH, r~2, r~3) -> (B, r~2)."""
    from decode_attention import tucker_decode_attention as dispatch
    return dispatch(q_lat, G, k, v, G_post, length, scale=scale, rope=rope, q_pos=q_pos)


class LogitsCrossEntropy(torch.autograd.Function):
    """F.cross_entropy(logits.float(), targets, ignore_index=-1) (the mean over non-ignored rows) that keeps
    for its backward the logits as they come (bf16 under autocast) and one log-sum-exp per row, not float32
    log-probabilities: the backward recomputes softmax - onehot from them. Same loss and gradient up to
    float rounding (tested against F.cross_entropy). Why: compiled, F.cross_entropy on the float32 copy of
    GPT-2's (12k, 50304) logits saved that 2.5 GB copy and read it back (1.8 ms of a 25 ms H200 step); this
    form reads the bf16 logits once forward and once backward (results/bench/LOG.md, session 7). The loss of
    nanoGPT's head (GPTConfig.loss_head='logits') and of every evaluation forward that returns logits; training
    with the fused head takes LinearCrossEntropy instead."""

    @staticmethod
    def forward(ctx, logits, targets):  # logits (M, V) any float dtype, targets (M,) long, -1 = ignored
        acc = torch.promote_types(logits.dtype, torch.float32)  # float32 (float64 stays)
        valid = targets != -1
        safe = targets.clamp(0, logits.size(1) - 1)  # an ignored row picks any class; weighed by 0 below
        lse = torch.logsumexp(logits.to(acc), dim=-1)  # (M,)
        picked = logits.gather(1, safe[:, None]).squeeze(1).to(acc)  # (M,)
        # a target outside -1 .. V-1 (e.g. -100, another library's ignore index) makes the loss nan, as the fused
        # head's (F.cross_entropy raises; a host check would sync every step)
        picked = torch.where(valid & (targets != safe), float("nan"), picked)
        n = valid.sum().to(acc)  # no valid row: 0/0 = nan, as F.cross_entropy gives
        ctx.save_for_backward(logits, lse, safe, valid, n)
        return ((lse - picked) * valid).sum() / n

    @staticmethod
    def backward(ctx, grad_loss):
        logits, lse, safe, valid, n = ctx.saved_tensors
        probs = torch.exp(logits.to(lse.dtype) - lse[:, None])  # (M, V) softmax, recomputed
        onehot = torch.arange(logits.size(1), device=logits.device)[None, :] == safe[:, None]  # (M, V)
        scale = (valid.to(lse.dtype) * (grad_loss / n))[:, None]  # (M, 1): ignored rows get no gradient
        return ((probs - onehot.to(lse.dtype)) * scale).to(logits.dtype), None


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits (M, V) against targets (M,), ignore_index -1, in at least float32:
    F.cross_entropy(logits.float(), targets, ignore_index=-1), its backward from the logits themselves
    (LogitsCrossEntropy)."""
    return LogitsCrossEntropy.apply(logits, targets)


class LinearCrossEntropy(torch.autograd.Function):
    """Mean over non-ignored rows of cross_entropy(h @ weight^T, targets) (ignore_index -1): the training loss
    head with its gradients computed in the forward. The loss is the graph's last op, so softmax - onehot is
    known as soon as the logits are: fused_loss.cross_entropy_rows takes each row's loss and that gradient in
    one pass over the logits (one Triton kernel on CUDA), then grad_h and grad_weight are two matmuls, and the
    logits are freed, never kept for the backward (nor is an unused incoming gradient for them materialized:
    the forward returns no logits). `chunk` > 0 does this for at most `chunk` rows at a time (less memory:
    GPTConfig.loss_chunk_tokens); 0 for all rows in one go (the fastest). Under autocast the matmuls run in
    its dtype, as the plain lm_head's do, and the gradient of the logits is in that dtype; the 1/n of the mean
    and the incoming gradient are applied in the backward, in float32, to the matmuls' outputs (at n = 12k
    tokens, (p - onehot)/n would underflow in float16)."""

    @staticmethod
    def forward(ctx, h, weight, targets, chunk, grad_enabled):  # h (M, d), weight (V, d), targets (M,)
        from fused_loss import cross_entropy_rows  # imported (its op registered) by GPT.__init__ already
        acc = torch.promote_types(h.dtype, torch.float32)  # float32, or float64 for a float64 model
        # needs_input_grad says requires_grad even under no_grad (evaluation): ask grad mode too
        want_h, want_w = (grad_enabled and ctx.needs_input_grad[0]), (grad_enabled and ctx.needs_input_grad[1])
        n = (targets != -1).sum().to(acc)  # F.cross_entropy's mean; no valid row: 0/0 = nan, as it gives
        step = chunk if chunk > 0 else h.size(0)
        # grad_weight sums a chunk's rows before the 1/n: in float16 a frequent token's row (count x |h|) can pass
        # 65504, so h is scaled by 2^-k (2^2k ~ rows) for that matmul there, and the backward undoes it
        w_shift = 2.0 ** -math.ceil(math.log2(max(step, 2)) / 2)
        total, grad_h, grad_w, w_scale = None, [], None, 1.0
        for a in range(0, h.size(0), step):
            h_c, t_c = h[a:a + step], targets[a:a + step]  # (c, d), (c,)
            logits = h_c @ weight.t()  # (c, V) in the matmul's dtype: the only logits alive
            row_loss, g = cross_entropy_rows(logits, t_c, want_h or want_w)  # (c,) acc, (c, V) softmax - onehot
            w_scale = w_shift if logits.dtype == torch.float16 else 1.0
            del logits
            part = row_loss.to(acc).sum()
            total = part if total is None else total + part
            if want_h:
                grad_h.append(g @ weight)  # (c, d), still without 1/n: each row's |g| sums to at most 2
            if want_w:
                gw = g.t() @ (h_c * w_scale if w_scale != 1.0 else h_c)  # (V, d), times w_scale
                grad_w = gw if grad_w is None else grad_w.to(acc) + gw
        grad_h = (grad_h[0] if len(grad_h) == 1 else torch.cat(grad_h)) if want_h else None
        ctx.dtypes, ctx.w_scale = (h.dtype, weight.dtype), w_scale
        ctx.save_for_backward(grad_h, grad_w, n)
        return total / n

    @staticmethod
    def backward(ctx, grad_loss):
        grad_h, grad_w, n = ctx.saved_tensors
        h_dtype, w_dtype = ctx.dtypes
        scale = grad_loss.to(n.dtype) / n  # the incoming gradient and the mean's 1/n, in float32 (or float64)
        return (None if grad_h is None else (grad_h.to(n.dtype) * scale).to(h_dtype),
                None if grad_w is None else (grad_w.to(n.dtype) * (scale / ctx.w_scale)).to(w_dtype),
                None, None, None)


def linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int = 0) -> torch.Tensor:
    """Mean cross-entropy of h (M, d) @ weight (V, d)^T against targets (M,) (ignore_index -1), its gradients
    computed in the forward (LinearCrossEntropy), the logits of at most `chunk` rows at a time (0: all)."""
    return LinearCrossEntropy.apply(h, weight, targets, chunk, torch.is_grad_enabled())


def _normal_(t: torch.Tensor, std: float) -> None:
    torch.nn.init.normal_(t, mean=0.0, std=std)


# ----------------------------------------------------------------------------------------
# Initialization, shared reasoning (GPT-2 scheme: std s = 0.02, residual outputs s_o = s/sqrt(2L)).
#
# MHA's per-head maps are W_Q,i W_K,i^T (entries of variance dH s^4) and W_V,i W_O,i (dH s^2 s_o^2).
# Every low-rank variant is initialized so that these effective per-head products, and the
# per-head query/key/value projections where they exist, have MHA's variance at initialization:
# a variant then starts from the same function statistics as MHA and only its rank differs.
# A down-projection to a latent of width r gets std 1/sqrt(d) (unit-variance latent), and the
# up-projection out of it gets std s * sqrt(d / r), so that down @ up has entries of variance s^2.
# tests/test_model.py::test_init_scales checks these variances for every variant.


class GroupedQueryAttention(nn.Module):
    """MHA (n_kv_head = n_head), GQA (n_head % n_kv_head == 0) and MQA (n_kv_head = 1).

    q = x W_Q, k = x W_K, v = x W_V with nG = n_kv_head key/value heads shared by groups of
    nH / nG query heads; RoPE (if any) rotates q and k in the head dimension dH.
    KV cache: k, v of nG heads, 2 nG dH values per token.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.n_kv_head = config.n_kv_head or config.n_head
        d, dH = config.n_embd, config.head_dim
        # one fused projection [W_Q | W_K | W_V]: (d) -> (nH + 2 nG) dH
        self.c_attn = nn.Linear(d, (self.n_head + 2 * self.n_kv_head) * dH, bias=config.bias)
        self.c_proj = nn.Linear(d, d, bias=config.bias)  # W_O
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.rope = config.pos_emb == "rope"

    rope_dim = staticmethod(lambda config: config.head_dim)

    def init_weights(self, std: float, out_std: float) -> None:
        _normal_(self.c_attn.weight, std)
        _normal_(self.c_proj.weight, out_std)
        for lin in (self.c_attn, self.c_proj):
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def cache_spec(self) -> Dict[str, Tuple[int, int]]:
        return {"k": (self.n_kv_head, self.head_dim), "v": (self.n_kv_head, self.head_dim)}

    def per_head_weights(self) -> Dict[str, Optional[torch.Tensor]]:
        """The weights in the paper's convention (x a row vector, q_i = x W_Q,i), as views of the
        parameters: W_Q (nH, d, dH); W_K, W_V (nG, d, dH), key/value head g serving query heads
        g nH/nG .. (g+1) nH/nG - 1; W_O (nH, dH, d), y = sum_i o_i W_O,i. Biases b_Q (nH, dH),
        b_K, b_V (nG, dH), b_O (d), or None. (c_attn stores [W_Q | W_K | W_V]^T, nn.Linear style.)"""
        nH, nG, dH = self.n_head, self.n_kv_head, self.head_dim
        sizes = [nH * dH, nG * dH, nG * dH]
        Wq, Wk, Wv = self.c_attn.weight.split(sizes, dim=0)  # (n dH, d) each
        bq, bk, bv = self.c_attn.bias.split(sizes) if self.c_attn.bias is not None else (None,) * 3
        heads = lambda w, n: w.view(n, dH, -1).transpose(1, 2)  # (n dH, d) -> (n, d, dH)
        bias = lambda b, n: None if b is None else b.view(n, dH)
        return dict(W_Q=heads(Wq, nH), W_K=heads(Wk, nG), W_V=heads(Wv, nG),
                    W_O=self.c_proj.weight.t().view(nH, dH, -1),
                    b_Q=bias(bq, nH), b_K=bias(bk, nG), b_V=bias(bv, nG), b_O=self.c_proj.bias)

    @torch.no_grad()
    def load_per_head_weights(self, weights: Dict[str, Optional[torch.Tensor]]) -> None:
        """Set the layer from `weights`, named and shaped as per_head_weights() (any dtype): every
        tensor the layer has must be given, none it lacks. A second name of one shared tensor (MLA's
        W_DV = W_DK, Tucker's U3_post = U3 with shared KV) may be left out, or must be equal. All or
        nothing: every tensor is checked before the first is written, so a refused load leaves the layer as it was."""
        own = self.per_head_weights()
        copies = []  # (target, value), written once every name has passed
        unknown = sorted(set(weights) - set(own))
        if unknown:
            raise ValueError(f"{type(self).__name__} has no {unknown}; its weights are {sorted(own)}")
        for name, target in own.items():
            value = weights.get(name)
            if target is None:
                if value is not None:
                    raise ValueError(f"{type(self).__name__} has no {name} (no bias, shared KV or no RoPE)")
                continue
            first = next(n for n, t in own.items() if t is target)  # == name unless shared
            if value is None:
                if first == name:
                    raise ValueError(f"{type(self).__name__}: {name} is missing")
                continue
            if tuple(value.shape) != tuple(target.shape):
                raise ValueError(f"{name}: shape {tuple(value.shape)}, expected {tuple(target.shape)}")
            if first != name and not torch.equal(value.to(target), weights[first].to(target)):
                raise ValueError(f"{name} is {first} in this layer (shared): the two must be equal")
            copies.append((target, value))
        for target, value in copies:
            target.copy_(value)

    def forward(self, x, rope, cache: Optional[LayerCache] = None):
        B, T, d = x.size()
        nH, nG, dH = self.n_head, self.n_kv_head, self.head_dim
        # q, k, v cut out of c_attn's output by splits of its (B, T, heads, dH) view, never by slices: the
        # backward of a split is one cat, which inductor writes as one copy kernel; slicing q and k out of
        # one block made it assemble c_attn's gradient from two zero-padded slice_backward's and an add, at
        # 3x the time (GPT-2 124M: 1.1 ms of a 25 ms step; scripts/bench_rope.py's none_* rows)
        qkv = self.c_attn(x).view(B, T, nH + 2 * nG, dH)  # (B, T, heads, dH): query heads, key heads, value heads
        q_start = cache.pos if cache is not None else 0
        if self.rope:  # rotated before the head transpose: (T, 1, dH/2) tables broadcast over heads
            cos, sin = rope_at(rope, q_start, T)
            qk, v = qkv.split([nH + nG, nG], dim=2)  # (B, T, nH + nG, dH), (B, T, nG, dH)
            # q and k in ONE call: its backward writes one gradient block beside v's. Two calls made
            # inductor assemble c_attn's gradient with a 4x slower kernel (MHA's RoPE: +11% of the
            # GPT-2 step, now ~3%; scripts/bench_rope.py, results/bench/LOG.md)
            q, k = apply_rope(qk, cos[:, None], sin[:, None]).split([nH, nG], dim=2)
        else:
            q, k, v = qkv.split([nH, nG, nG], dim=2)  # (B, T, nH, dH), (B, T, nG, dH) x 2
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, nH, T, dH), (B, nG, T, dH) x 2
        if cache is not None:
            kv = cache.append(k=k, v=v)
            k, v = kv["k"], kv["v"]  # (B, nG, S, dH)
        y = _attend(q, k, v, scale=1.0 / math.sqrt(dH), dropout_p=self.dropout if self.training else 0.0,
                    q_start=q_start)  # (B, nH, T, dH)
        y = y.transpose(1, 2).reshape(B, T, d)  # (B, T, nH dH)
        return self.resid_dropout(self.c_proj(y))

    def decode(self, io: DecodeIO, at: DecodePosition, cache: LayerCache) -> "Stream":
        """One new token per sequence, the residual stream io.x (B, d), at the device position `at.pos`: the
        static decode step (fixed shapes and addresses, no host sync). Returns the stream x + attn(norm(x)).
        The weights are used as trained (c_attn is already one fused projection), the cache holds rotated keys."""
        B = io.x.size(0)
        nH, nG, dH = self.n_head, self.n_kv_head, self.head_dim
        qk, v = io.project(self.c_attn.weight, self.c_attn.bias).split([(nH + nG) * dH, nG * dH], dim=1)
        qk = qk.view(B, nH + nG, dH)  # the query heads, then the key heads
        # one call rotates q and the new key (RoPE: the cache holds rotated keys), writes the new key and value
        # into the cache at at.pos (= length - 1) and attends: no separate rotation or cache-write kernels
        y = decode_attention(qk[:, :nH], cache.store["k"], cache.store["v"], at.length, scale=1.0 / math.sqrt(dH),
                             rope=at.tables if self.rope else None, rope_keys="stored", rotate_q=self.rope,
                             new_kv=(qk[:, nH:], v.view(B, nG, dH)))  # (B, nH, dH)
        return io.residual(y.reshape(B, nH * dH), self.c_proj.weight, self.c_proj.bias)

    def flops_per_token(self, ctx: int) -> int:
        """Forward FLOPs per token: weight matmuls + scores and weighted sum over ctx keys."""
        d, nH, nG, dH = self.c_proj.in_features, self.n_head, self.n_kv_head, self.head_dim
        return 2 * (d * (nH + 2 * nG) * dH + d * d) + 2 * nH * ctx * (dH + dH)


class LatentAttention(InferenceForm, nn.Module):
    """Multi-head latent attention (MLA, DeepSeek-V2) with shared or separated KV down-projection.

    Query:   c_Q = x W_DQ (dcQ), q_i = c_Q W_UQ,i (dH)         [or q = x W_Q when q_rank is None]
    Key:     c_K = x W_DK (dcK),  k_i = c_K W_UK,i (dH)         [c_K = c_V = x W_DKV when shared]
    Value:   c_V = x W_DV (dcK),  v_i = c_V W_UV,i (dH);   output W_O stays full rank.

    Unfused (training): heads are up-projected and attend as in MHA.
    Fused / absorbed (inference; always with latent RoPE): q_i W_UK,i^T lives in the dcK latent,
    all heads attend MQA-style to the one latent key c_K and value c_V, and W_UV,i is applied
    to the attended latent per head afterwards. Mathematically identical to unfused.

    RoPE: 'decoupled' adds per-head rotary query dims q^R_i = c_Q W_QR,i and one shared rotary key
    k^R = x W_KR (rope_head_dim each); score = (q_i.k_i + q^R_i.k^R) / sqrt(dH + rope_head_dim).
    'latent' rotates q_i W_UK,i^T and c_K inside the dcK latent (eq. eq_mla_coupled_rope).
    KV cache: c_K and c_V (c_KV once when shared), + k^R for decoupled RoPE; the latent is cached
    unrotated, so with latent RoPE the cached keys are rotated when read.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        d, nH, dH = config.n_embd, config.n_head, config.head_dim
        self.n_head, self.head_dim = nH, dH
        self.q_rank, self.kv_rank, self.shared_kv = config.q_rank, config.kv_rank, config.shared_kv
        rope = config.pos_emb == "rope"
        self.decoupled = rope and config.mla_rope == "decoupled"
        self.latent_rope = rope and config.mla_rope == "latent"
        self.rope_head_dim = config.rope_head_dim if self.decoupled else 0
        # fused_mla_rope's backend for the decoupled query and key: None = its BACKEND ('auto': the kernels where they
        # can run), or torch ops
        self.qk_backend = None if config.mla_rope_kernels == "auto" else "torch"
        q_in = self.q_rank or d  # width the query up-projection (or full query) reads from
        if self.q_rank is None:
            self.q_down = None
            self.q_up = nn.Linear(d, nH * dH, bias=config.bias)  # full W_Q
        else:
            self.q_down = nn.Linear(d, self.q_rank, bias=config.bias)  # W_DQ
            self.q_up = nn.Linear(self.q_rank, nH * dH, bias=config.bias)  # W_UQ
        self.k_down = nn.Linear(d, self.kv_rank, bias=config.bias)  # W_DKV (shared) or W_DK
        self.v_down = None if self.shared_kv else nn.Linear(d, self.kv_rank, bias=config.bias)  # W_DV
        self.k_up = nn.Linear(self.kv_rank, nH * dH, bias=config.bias)  # W_UK
        self.v_up = nn.Linear(self.kv_rank, nH * dH, bias=config.bias)  # W_UV
        if self.decoupled:
            self.q_rope = nn.Linear(q_in, nH * self.rope_head_dim, bias=config.bias)  # W_QR
            self.k_rope = nn.Linear(d, self.rope_head_dim, bias=config.bias)  # W_KR, one shared head
            import fused_mla_rope
            fused_mla_rope.register_ops()  # its query / key ops now (where they can run), before torch.compile traces
        self.c_proj = nn.Linear(nH * dH, d, bias=config.bias)  # W_O
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.fused = self.latent_rope  # latent RoPE only exists in the absorbed form
        self.scale = 1.0 / math.sqrt(dH + self.rope_head_dim)
        # decode with everything x feeds merged into one matrix, x -> [q_i W_UK,i^T for every head | q^R |
        # c_K (| c_V) (| k^R)] (d, nH dcK + ...), and W_UV with W_O into one (nH dcK, d): two matmuls per
        # layer instead of five, as MHA, for more weight bytes (nH dcK columns where MHA has nH dH). On an
        # H200 the GPT-2 MLA [128] step (nH dcK = 2d) takes 10-13% less time at batch 1, 27-34% at batch 32
        # (results/bench/LOG.md): on by default up to that size, nH dcK <= 2d. An inference switch
        self.merged_decode = nH * self.kv_rank <= 2 * d

    @staticmethod
    def rope_dim(config: GPTConfig) -> int:
        return config.kv_rank if config.mla_rope == "latent" else config.rope_head_dim

    def init_weights(self, std: float, out_std: float) -> None:
        d = self.c_proj.out_features
        for down in (self.q_down, self.k_down, self.v_down):
            if down is not None:
                _normal_(down.weight, 1.0 / math.sqrt(d))  # unit-variance latent
        q_in = self.q_rank or d
        _normal_(self.q_up.weight, std * math.sqrt(d / q_in) if self.q_down is not None else std)
        _normal_(self.k_up.weight, std * math.sqrt(d / self.kv_rank))
        _normal_(self.v_up.weight, std * math.sqrt(d / self.kv_rank))
        if self.decoupled:
            _normal_(self.q_rope.weight, std * math.sqrt(d / q_in) if self.q_down is not None else std)
            _normal_(self.k_rope.weight, std)
        _normal_(self.c_proj.weight, out_std)
        for m in self.modules():
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def cache_spec(self) -> Dict[str, Tuple[int, int]]:
        # The key row is [c_K | k^R] (decoupled RoPE appends the shared rotary key), so the absorbed
        # attention reads ONE key tensor; shared KV stores it once and the value is its first dcK dims.
        key_dim = self.kv_rank + self.rope_head_dim
        return {"kv": (1, key_dim)} if self.shared_kv else {"k": (1, key_dim), "v": (1, self.kv_rank)}

    def per_head_weights(self) -> Dict[str, Optional[torch.Tensor]]:
        """The weights in the paper's convention (x a row vector), as views of the parameters:
        c_Q = x W_DQ, q_i = c_Q W_UQ,i; k_i = (x W_DK) W_UK,i; v_i = (x W_DV) W_UV,i; y = sum_i o_i W_O,i.
        W_DQ (d, dcQ), or None for the full query (then W_UQ,i is W_Q,i, d x dH); W_UQ (nH, dcQ, dH);
        W_DK (d, dcK) (W_DKV when shared); W_UK (nH, dcK, dH); W_DV (d, dcK), the same tensor as W_DK
        when shared; W_UV (nH, dcK, dH); W_O (nH, dH, d); decoupled RoPE: W_QR (nH, dcQ or d, dR) and
        W_KR (d, dR), else None. Biases b_DQ, b_UQ (nH, dH), b_DK, b_UK, b_DV, b_UV, b_QR (nH, dR),
        b_KR, b_O, or None (b_DV is b_DK when shared)."""
        nH, dH, dR = self.n_head, self.head_dim, self.rope_head_dim
        q_rope, k_rope = (self.q_rope, self.k_rope) if self.decoupled else (None, None)
        up = lambda lin, n: None if lin is None else lin.weight.view(nH, n, -1).transpose(1, 2)  # (nH, r, n)
        down = lambda lin: None if lin is None else lin.weight.t()  # (d, r)
        bias = lambda lin, *shape: None if lin is None or lin.bias is None else lin.bias.view(*shape)
        W_DK, b_DK = down(self.k_down), bias(self.k_down, -1)
        return dict(W_DQ=down(self.q_down), W_UQ=up(self.q_up, dH), W_DK=W_DK, W_UK=up(self.k_up, dH),
                    W_DV=W_DK if self.shared_kv else down(self.v_down), W_UV=up(self.v_up, dH),
                    W_O=self.c_proj.weight.t().view(nH, dH, -1), W_QR=up(q_rope, dR), W_KR=down(k_rope),
                    b_DQ=bias(self.q_down, -1), b_UQ=bias(self.q_up, nH, dH), b_DK=b_DK, b_UK=bias(self.k_up, nH, dH),
                    b_DV=b_DK if self.shared_kv else bias(self.v_down, -1), b_UV=bias(self.v_up, nH, dH),
                    b_QR=bias(q_rope, nH, dR), b_KR=bias(k_rope, -1), b_O=self.c_proj.bias)

    load_per_head_weights = GroupedQueryAttention.load_per_head_weights

    def cached_kv(self, cache: LayerCache) -> Tuple[torch.Tensor, torch.Tensor]:
        """The whole cache buffers as (key (B, 1, L, dcK + dR), value (B, 1, L, dcK)) views."""
        if self.shared_kv:
            return cache.store["kv"], cache.store["kv"][..., :self.kv_rank]
        return cache.store["k"], cache.store["v"]

    def x_projections(self) -> List[nn.Linear]:
        """The linears that read x, in this order: the query down-projection (or the full query), the
        key (and value) down-projection, then with decoupled RoPE the shared rotary key (and the full
        query's rotary part). forward and the inference form run them as one matmul."""
        first = [self.q_down if self.q_down is not None else self.q_up, self.k_down]
        first += [] if self.shared_kv else [self.v_down]
        if self.decoupled:
            first += [self.k_rope] + ([] if self.q_down is not None else [self.q_rope])
        return first

    def forward(self, x, rope, cache: Optional[LayerCache] = None):
        B, T, _ = x.size()  # (B, T, d)
        nH, dH, dc, dR = self.n_head, self.head_dim, self.kv_rank, self.rope_head_dim
        # every linear reading x in ONE matmul (their weights stacked), split back (a split's backward is one cat)
        parts = _stacked_linear(x, self.x_projections())
        c_k = parts[1]  # (B, T, dcK)
        c_v = c_k if self.shared_kv else parts[2]  # (B, T, dcK)
        q_r = k_r = q_wide = None
        if self.q_down is None:  # the full query and its rotary part came with the first matmul
            q = parts[0].view(B, T, nH, dH)  # (B, T, nH, dH)
            if self.decoupled:
                q_r, k_r = parts[-1].view(B, T, nH, dR), parts[-2]  # (B, T, nH, dR), (B, T, dR)
        else:
            c_q = parts[0]  # (B, T, dcQ)
            if self.decoupled:  # q_i and q^R_i from c_Q in one matmul, laid out per head as [q_i | q^R_i]
                q_wide = _stacked_linear(c_q, [self.q_up, self.q_rope], heads=nH).view(B, T, nH, dH + dR)
                q, q_r = q_wide.split([dH, dR], -1)  # (B, T, nH, dH), (B, T, nH, dR)
                k_r = parts[-1]  # (B, T, dR)
            else:
                q = self.q_up(c_q).view(B, T, nH, dH)  # (B, T, nH, dH)
        q_start = cache.pos if cache is not None else 0
        absorbed = self.fused or cache is not None  # else unabsorbed, as in training: no cache, so q_start 0
        if self.decoupled and not absorbed:  # [q_i | q^R_i] whole for fused_mla_rope, which rotates (below)
            q_wide = torch.cat((q, q_r), dim=-1) if q_wide is None else q_wide  # (B, T, nH, dH + dR)
        elif self.decoupled:
            cos, sin = rope_at(rope, q_start, T)  # (T, dR/2)
            q_r = apply_rope(q_r, cos[:, None], sin[:, None]).transpose(1, 2)  # (B, nH, T, dR), rotated before the transpose
            k_r = apply_rope(k_r, cos, sin).unsqueeze(1)  # (B, 1, T, dR)
        q = q.transpose(1, 2)  # (B, nH, T, dH)
        c_k, c_v = c_k.unsqueeze(1), c_v.unsqueeze(1)  # (B, 1, T, dcK)

        if cache is not None:
            key = torch.cat((c_k, k_r), dim=-1) if self.decoupled else c_k  # (B, 1, T, dcK + dR)
            full = cache.append(**({"kv": key} if self.shared_kv else {"k": key, "v": c_v}))
            key = full["kv"] if self.shared_kv else full["k"]  # (B, 1, S, dcK + dR)
            c_k, k_r = key[..., :dc], (key[..., dc:] if self.decoupled else None)  # (B, 1, S, dcK), (B, 1, S, dR)
            c_v = c_k if self.shared_kv else full["v"]  # (B, 1, S, dcK)
        dropout_p = self.dropout if self.training else 0.0

        if absorbed:
            # absorbed: q_i W_UK,i^T puts each query head in the dcK latent of the shared key
            W_UK = self.k_up.weight.view(nH, dH, dc)  # (nH, dH, dcK)
            q_lat = torch.matmul(q, W_UK)  # (B, nH, T, dcK)
            k = c_k
            if self.latent_rope:
                q_lat = apply_rope(q_lat, *rope_at(rope, q_start, T))
                # cached latents are stored unrotated (one tensor serves as K and V when shared):
                # the S keys at positions 0 .. S-1 are rotated as they are read.
                k = apply_rope(c_k, *rope_at(rope, 0, c_k.size(2)))
            if self.decoupled:
                q_lat = torch.cat((q_lat, q_r), dim=-1)  # (B, nH, T, dcK + dR)
                k = torch.cat((k, k_r), dim=-1)  # (B, 1, S, dcK + dR)
            # (a key bias b_UK,i would add q_i . b_UK,i to every score of a query: softmax ignores it)
            o_lat = _attend(q_lat, k, c_v, scale=self.scale, dropout_p=dropout_p, q_start=q_start)  # (B, nH, T, dcK)
            W_UV = self.v_up.weight.view(nH, dH, dc).transpose(1, 2)  # (nH, dcK, dH)
            y = torch.matmul(o_lat, W_UV)  # (B, nH, T, dH)
            if self.v_up.bias is not None:
                y = y + self.v_up.bias.view(nH, 1, dH)  # rows of softmax sum to one
        else:
            S = c_k.size(2)
            # k_i and v_i by two matmuls, also from a shared latent: each output its own dense tensor, so SDPA's
            # gradients of k and v feed their matmuls' backward as they are (stacked into one matmul, the split's
            # backward concatenated them: a copy of both, 0.22 ms a step at 12x1024 on an H200)
            from_latent = False
            if self.decoupled:
                import fused_mla_rope  # imported (its ops registered) by __init__ already
                # with qk_backend 'torch' decoupled_qk_from_latent is k_up's matmul and the torch form
                from_latent = fused_mla_rope.K_UP_IN_KERNEL
            v = self.v_up(c_v.squeeze(1)).view(B, S, nH, dH).transpose(1, 2)  # (B, nH, S, dH)
            k = None if from_latent else self.k_up(c_k.squeeze(1))  # (B, S, nH dH)
            if self.decoupled:  # SDPA's [q_i | R q^R_i] and [k_i | R k^R] built by one kernel (and their gradients)
                # q_wide is this layer's own intermediate (its up-projection's output, or the cat above), which the
                # kernels may rotate where it is (fused_mla_rope.Q_IN_PLACE; always with K_UP_IN_KERNEL)
                if from_latent:  # k_i = c_K W_UK,i^T inside the K kernel
                    c_k2 = c_k.squeeze(1)  # (B, S, dcK)
                    W_UK, b_UK = (None if t is None else t.to(c_k2.dtype) for t in (self.k_up.weight, self.k_up.bias))
                    Q, K = fused_mla_rope.decoupled_qk_from_latent(q_wide, c_k2, W_UK, b_UK, k_r, *rope_at(rope, 0, T),
                                                                   backend=self.qk_backend)
                else:
                    Q, K = fused_mla_rope.decoupled_qk(q_wide, k.view(B, S, nH, dH), k_r, *rope_at(rope, 0, T),
                                                       backend=self.qk_backend, q_in_place=fused_mla_rope.Q_IN_PLACE)
                q, k = Q.transpose(1, 2), K.transpose(1, 2)  # (B, nH, T, dH + dR): views, no copy
            else:
                k = k.view(B, S, nH, dH).transpose(1, 2)  # (B, nH, S, dH)
            y = _attend(q, k, v, scale=self.scale, dropout_p=dropout_p, q_start=q_start)  # (B, nH, T, dH)
        y = y.transpose(1, 2).reshape(B, T, nH * dH)
        return self.resid_dropout(self.c_proj(y))

    def build_inference_form(self) -> Dict[str, torch.Tensor]:
        """Absorbed MLA for decoding: every projection of x in one matmul (W1 = [W_Q or W_DQ | W_DK
        | W_DV | W_KR (| W_QR when the query is full)]), the query up-projections in a second (W2 =
        [W_UQ | W_QR], low-rank query only), W_UK (nH, dH, dcK) absorbed into the query and W_UV
        (nH, dcK, dH) applied to the attended latent. Kept factored: at batch 1 a step reads every
        weight once, and the factors are fewer bytes than their products."""
        nH, dH, dc = self.n_head, self.head_dim, self.kv_rank
        first = self.x_projections()
        W1, b1 = _cat_linear(first)
        form = {"W1": W1, "b1": b1, "split1": [lin.out_features for lin in first],
                "W_UK": self.k_up.weight.view(nH, dH, dc),  # (nH, dH, dcK)
                "W_UV": self.v_up.weight.view(nH, dH, dc).transpose(1, 2).contiguous(),  # (nH, dcK, dH)
                "b_UV": None if self.v_up.bias is None else self.v_up.bias.view(nH, 1, dH),
                "W_O": self.c_proj.weight, "b_O": self.c_proj.bias}  # (d, nH dH), (d) or None
        if self.q_down is not None:
            second = [self.q_up] + ([self.q_rope] if self.decoupled else [])
            form["W2"], form["b2"] = _cat_linear(second)
        return form

    def _absorbed_inputs(self, x2d: torch.Tensor, form: Dict[str, torch.Tensor]):
        """What a decode step computes from x (B, d) in the absorbed form, before RoPE: q_lat = q_i W_UK,i^T
        (B, nH, dcK), the rotary query q^R (B, nH dR) or None, c_K (B, dcK), c_V (B, dcK), k^R (B, dR) or None."""
        B = x2d.size(0)
        nH, dH, dc = self.n_head, self.head_dim, self.kv_rank
        parts = list(F.linear(x2d, form["W1"], form["b1"]).split(form["split1"], dim=1))
        c_q, c_k = parts[0], parts[1]  # (B, dcQ or nH dH), (B, dcK)
        c_v = c_k if self.shared_kv else parts[2]
        if self.q_down is not None:  # low-rank query: q and its rotary dims from c_Q in one matmul
            q_all = F.linear(c_q, form["W2"], form["b2"])  # (B, nH dH (+ nH dR))
            q, q_r = q_all[:, :nH * dH], (q_all[:, nH * dH:] if self.decoupled else None)
            k_r = parts[-1] if self.decoupled else None
        else:  # full query: c_q is q itself, its rotary dims came with the first matmul
            q, q_r = c_q, (parts[-1] if self.decoupled else None)
            k_r = parts[-2] if self.decoupled else None
        q_lat = (q.view(B, nH, 1, dH) @ form["W_UK"]).view(B, nH, dc)  # (B, nH, dcK)
        return q_lat, q_r, c_k, c_v, k_r

    def _absorbed_output(self, o_lat: torch.Tensor, form: Dict[str, torch.Tensor]) -> torch.Tensor:
        """y (B, d) from the attended latents o_lat (B, nH, dcK): W_UV,i per head (+ b_UV), then W_O."""
        B, (nH, dH, dc) = o_lat.size(0), (self.n_head, self.head_dim, self.kv_rank)
        y = o_lat.reshape(B, nH, 1, dc) @ form["W_UV"]  # (B, nH, 1, dH)
        if form["b_UV"] is not None:
            y = y + form["b_UV"]  # rows of softmax sum to one
        return F.linear(y.reshape(B, nH * dH), form["W_O"], form["b_O"])

    def build_merged_form(self, form: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """merged_decode's matrices (InferenceForm.merged_form). Both maps are affine, so each is read off its
        action on the unit vectors, in float32 (float64 stays): W_in (nH dcK + nH dR + dcK (+ dcK) + dR, d) and
        b_in map x to [q_lat | q^R | c_K (| c_V) (| k^R)]; W_out (d, nH dcK) and b_out map o_lat to y."""
        dtype = form["W1"].dtype
        acc = torch.promote_types(dtype, torch.float32)
        wide = {k: (v.to(acc) if isinstance(v, torch.Tensor) else v) for k, v in form.items()}
        d, nH, dc = self.c_proj.out_features, self.n_head, self.kv_rank
        basis = torch.cat([torch.zeros(1, d), torch.eye(d)]).to(device=form["W1"].device, dtype=acc)
        q_lat, q_r, c_k, c_v, k_r = self._absorbed_inputs(basis, wide)
        pieces = [q_lat.reshape(d + 1, -1)] + ([q_r] if q_r is not None else []) + [c_k]
        pieces += ([] if self.shared_kv else [c_v]) + ([k_r] if k_r is not None else [])
        out = torch.cat(pieces, dim=1)  # (1 + d, width): the image of 0, then of each unit vector
        lat = torch.cat([torch.zeros(1, nH * dc), torch.eye(nH * dc)]).to(basis)
        y = self._absorbed_output(lat.view(-1, nH, dc), wide)  # (1 + nH dcK, d)
        # without biases in the layer both maps are linear (the image of 0 is 0): no bias, so F.linear is one
        # plain GEMM (with one, cuBLAS may add a kernel per call: 24 launches in a GPT-2 decode step)
        biased = any(name.endswith("bias") for name, _ in self.named_parameters())
        return {"b_in": out[0].to(dtype).contiguous() if biased else None,
                "W_in": (out[1:] - out[0]).t().to(dtype).contiguous(),  # (width, d), F.linear layout
                "split_in": [piece.size(1) for piece in pieces],
                "b_out": y[0].to(dtype).contiguous() if biased else None,
                "W_out": (y[1:] - y[0]).t().to(dtype).contiguous()}  # (d, nH dcK)

    def decode(self, io: DecodeIO, at: DecodePosition, cache: LayerCache) -> "Stream":
        """Static decode step (see GroupedQueryAttention.decode), absorbed: all heads attend MQA-style
        to the one cached latent key [c_K | k^R] and value c_V (merged_decode: one matmul in, one out)."""
        B = io.x.size(0)
        nH, dc, dR = self.n_head, self.kv_rank, self.rope_head_dim
        if self.merged_decode:
            form = self.merged_form()
            parts = io.project(form["W_in"], form["b_in"]).split(form["split_in"], dim=1)
            q_lat = parts[0].view(B, nH, dc)  # (B, nH, dcK)
            q_r = parts[1] if self.decoupled else None  # (B, nH dR)
            c_k = parts[2 if self.decoupled else 1]  # (B, dcK)
            c_v = c_k if self.shared_kv else parts[3 if self.decoupled else 2]
            k_r = parts[-1] if self.decoupled else None  # (B, dR)
        else:
            form = self.inference_form()
            q_lat, q_r, c_k, c_v, k_r = self._absorbed_inputs(io.normed(), form)
        key = c_k
        if self.decoupled:  # only the last dR columns rotate: done here, the kernel rotates whole rows
            q_lat = torch.cat((q_lat, at.rotate(q_r.view(B, nH, dR))), dim=-1)  # (B, nH, dcK + dR)
            key = torch.cat((c_k, at.rotate(k_r)), dim=-1)  # (B, dcK + dR)
        k_all, v_all = self.cached_kv(cache)
        # latent RoPE: the latent is cached unrotated and rotated as read, the query rotated in the same call,
        # which also writes the new latent(s) into the cache at at.pos
        o_lat = decode_attention(q_lat, k_all, v_all, at.length, scale=self.scale,
                                 rope=at.tables if self.latent_rope else None, rotate_q=self.latent_rope,
                                 new_kv=(key.view(B, 1, -1), None if self.shared_kv else c_v.view(B, 1, dc)))  # (B, nH, dcK)
        if self.merged_decode:
            return io.residual(o_lat.reshape(B, nH * dc), form["W_out"], form["b_out"])  # the stream
        return io.add(self._absorbed_output(o_lat, form))  # the stream

    def flops_per_token(self, ctx: int) -> int:
        d, nH, dH, dc = self.c_proj.out_features, self.n_head, self.head_dim, self.kv_rank
        dq = self.q_rank
        w = (d * dq + dq * nH * dH) if dq else d * nH * dH  # query
        w += d * dc * (1 if self.shared_kv else 2) + nH * dH * d  # down-projections, W_O
        if self.decoupled:
            w += (dq or d) * nH * self.rope_head_dim + d * self.rope_head_dim
        if self.fused:  # absorbed: W_UK on the query, W_UV on the attended latent, attention in dcK
            w += 2 * nH * dH * dc
            att = nH * ctx * (dc + self.rope_head_dim + dc)
        else:  # up-project every key and value
            w += 2 * dc * nH * dH
            att = nH * ctx * (dH + self.rope_head_dim + dH)
        return 2 * w + 2 * att


# TuckerAttention.merged_at, at the batches decode_linear's GEMV serves: a merged matrix may add at most this many
# elements to the two factors it replaces (4 MiB in bf16, ~1 us of reads at an H200's 4.2 TB/s against the ~2 us of
# the batch-1 kernel saved)
TUCKER_MERGE_MAX_EXTRA = 1 << 21
# TuckerAttention's factored step launches its split kernel with programmatic dependent launch (to overlap G_q's short
# matmul before it) at up to this many sequences. H200 at 4k, PDL against none (results/bench/LOG.md, session 53):
# LLaMA-1B [32,128,128] -2.2% at batch 1 (session 52), -1.1% at 8, -0.6% at 16, +0.8% at 32; GPT-2 Tucker
# [8,128,128] -1.9% at 8 and 16, +0.8% at 32 (+1.4% at batch 1); shared -2.1% / -1.8% at 8 / 16, -0.9% at 32
# (-4.3% at 1)
TUCKER_PDL_SPLIT_ROWS = 16


class TuckerAttention(InferenceForm, nn.Module):
    """Tucker attention (Definition 2.1): W = C x1 U1 x2 U2 x3 U3, W~ = C~ x1 U~1 x2 U~2 x3 U~3.

        G   = C  x1 U1          (nH, r2, r3)     per-head query core, recomputed each step (tiny)
        G~  = C~ x1 U~1         (nH, r~2, r~3)   per-head output core
        q_i = (x U2) G_i        (B, nH, N, r3)   queries live in the key latent
        k   = x U3              (B, 1, N, r3)    ONE key head shared by all query heads
        v   = x U~3             (B, 1, N, r~3)   ONE value head (k itself when KV is shared)
        o_i = softmax(q_i k^T / sqrt(dH)) v      MQA-style SDPA, no per-head K/V copies
        y   = (sum_i o_i G~_i^T) U~2^T           (B, N, d)

    Scale: 1/sqrt(dH), as the paper writes it (eq. eq_kv_caching); with full ranks this makes
    Tucker exactly MHA (Lemma B.1), see tensor_forms.to_tucker (scripts/convert.py's mha_to_tucker
    at lower ranks).
    Latent RoPE (Definition 3.1) rotates q_i and k in the r3 latent: one key rotation for all heads.
    KV cache: k and v (r3 + r~3 values per token), or the one latent x U3 when shared (r3),
    cached unrotated so it serves as the value too; keys are rotated when read.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        d, nH = config.n_embd, config.n_head
        r1, r2, r3 = config.tucker_ranks
        p1, p2, p3 = config.tucker_ranks_post
        self.n_head, self.head_dim = nH, config.head_dim
        self.ranks, self.ranks_post, self.shared_kv = (r1, r2, r3), (p1, p2, p3), config.shared_kv
        self.core = nn.Parameter(torch.empty(r1, r2, r3))  # C
        self.U1 = nn.Parameter(torch.empty(nH, r1))  # head basis
        self.U2 = nn.Parameter(torch.empty(d, r2))  # query basis
        self.U3 = nn.Parameter(torch.empty(d, r3))  # key basis (the cached key latent)
        self.core_post = nn.Parameter(torch.empty(p1, p2, p3))  # C~
        self.U1_post = nn.Parameter(torch.empty(nH, p1))  # U~1
        self.U2_post = nn.Parameter(torch.empty(d, p2))  # U~2, output basis
        self.U3_post = None if self.shared_kv else nn.Parameter(torch.empty(d, p3))  # U~3, value basis
        self.bias = nn.Parameter(torch.zeros(d)) if config.bias else None  # output bias
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.rope = config.pos_emb == "rope"
        # decode through decode_attention.tucker_decode_attention (the per-head cores inside the
        # kernel; with RoPE only for shared KV, whose cache holds unrotated keys). An inference
        # switch, not a model key: off, as the GPU timing of the whole step found it slower
        self.fused_decode = False
        # decode with the query core merged into the down-projection, [U2 G_q | U3 | U~3] (d, nH r3 + r3
        # (+ r~3)), and the output core into U~2, G_o U~2^T (nH r~3, d): two matmuls per layer instead of
        # four, for more weight bytes. An inference switch, not a model key: True merged, False factored,
        # None (the default) chosen per batch by merged_at
        self.merged_decode: Optional[bool] = None
        merge_q = d * nH * r3 - (d * r2 + r2 * nH * r3)  # [U2 G_q] (d, nH r3) against U2 and G_q
        merge_o = nH * p3 * d - (nH * p3 * p2 + p2 * d)  # G_o U~2^T (nH r~3, d) against G_o and U~2^T
        self._merge_fits = nH * r3 <= d and nH * p3 <= d  # no larger than MHA's W_Q and W_O (r3, r~3 <= dH)
        self._merge_small = max(merge_q, merge_o) <= TUCKER_MERGE_MAX_EXTRA
        self._down_width = r2 + r3 + (0 if config.shared_kv else p3)  # W_down = [U2 | U3 (| U~3)] (d, this)

    def merged_at(self, batch_size: int) -> bool:
        """Whether a decode step of batch_size sequences takes the merged form: merged_decode where it is set, else
        where the merged matrices are no larger than MHA's W_Q and W_O, which MHA reads every step, and, at the
        batches whose down-projection decode_linear's GEMV serves (decode_linear_serves), each adds at most
        TUCKER_MERGE_MAX_EXTRA elements to the factors it replaces: a kernel saved against the bytes added. H200
        (results/bench/LOG.md): at batch 1 GPT-2's Tucker steps, 0.49M more a matrix, are faster merged,
        LLaMA-1B's, 3.7-3.9M more, factored (session 51); from 5 sequences, where cuBLAS's GEMMs serve, LLaMA-1B's
        [32,*,64] rows take the merged form, measured 4-6.5% faster at 5-32 sequences (session 53; their merged
        matrices then live beside the factors, +17 MB a layer in bf16). At 3-4 sequences the GEMV serves their
        down-projections (2048 x 256, decode_linear.WIDE_ROWS_MAX_WEIGHT): factored, 1.2-2.1% faster there than
        merged on cuBLAS (session 54 call 9)."""
        if self.merged_decode is not None:
            return self.merged_decode
        return self._merge_fits and (self._merge_small or
                                     not decode_linear_serves(batch_size, self.U2.size(0), self._down_width))

    @staticmethod
    def rope_dim(config: GPTConfig) -> int:
        return config.tucker_ranks[2]

    def init_weights(self, std: float, out_std: float) -> None:
        # Effective per-head maps W_i = U2 G_i U3^T and W~_i = U~3 G~_i^T U~2^T get MHA's variances
        # (dH s^4 and dH s^2 s_o^2): U2, U3, U~3 ~ s (so k and v spread like MHA's), U~2 ~ s_o,
        # U1, U~1 ~ 1/sqrt(r1) (a head mixes r1 core slices at unit gain), and the cores carry the
        # rest: var(C) = dH / (r2 r3), var(C~) = dH / (r~2 r~3). At full ranks with r3 = dH this is
        # MHA's statistics exactly; with r3 != dH queries spread by sqrt(dH / r3) against MHA's
        # so that the scores q.k / sqrt(dH) keep MHA's variance.
        (r1, r2, r3), (p1, p2, p3), dH = self.ranks, self.ranks_post, self.head_dim
        _normal_(self.U2, std)
        _normal_(self.U3, std)
        _normal_(self.U1, 1.0 / math.sqrt(r1))
        _normal_(self.core, math.sqrt(dH / (r2 * r3)))
        if self.U3_post is not None:
            _normal_(self.U3_post, std)
        _normal_(self.U2_post, out_std)
        _normal_(self.U1_post, 1.0 / math.sqrt(p1))
        _normal_(self.core_post, math.sqrt(dH / (p2 * p3)))
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def cache_spec(self) -> Dict[str, Tuple[int, int]]:
        if self.shared_kv:
            return {"kv": (1, self.ranks[2])}
        return {"k": (1, self.ranks[2]), "v": (1, self.ranks_post[2])}

    def per_head_weights(self) -> Dict[str, Optional[torch.Tensor]]:
        """The Tucker factors under their parameter names: core C (r1, r2, r3), U1 (nH, r1), U2 (d, r2),
        U3 (d, r3), core_post C~ (r~1, r~2, r~3), U1_post U~1 (nH, r~1), U2_post U~2 (d, r~2), U3_post
        U~3 (d, r~3), the same tensor as U3 when shared; b_O (d), the output bias, or None. The
        per-head views are head_cores(): W_i = U2 G_i U3^T and W~_i = U~2 G~_i U~3^T."""
        return dict(core=self.core, U1=self.U1, U2=self.U2, U3=self.U3, core_post=self.core_post,
                    U1_post=self.U1_post, U2_post=self.U2_post,
                    U3_post=self.U3 if self.shared_kv else self.U3_post, b_O=self.bias)

    load_per_head_weights = GroupedQueryAttention.load_per_head_weights

    def head_cores(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """G = C x1 U1 (nH, r2, r3) and G~ = C~ x1 U~1 (nH, r~2, r~3)."""
        G = torch.einsum("ha,abc->hbc", self.U1, self.core)
        G_post = torch.einsum("ha,abc->hbc", self.U1_post, self.core_post)
        return G, G_post

    def down_projection(self) -> torch.Tensor:
        """[U2 | U3 | U~3] (d, r2 + r3 + r~3), U~3 left out when shared: x is read by ONE matmul."""
        return torch.cat([self.U2, self.U3] + ([] if self.shared_kv else [self.U3_post]), dim=1)

    def forward(self, x, rope, cache: Optional[LayerCache] = None):
        B, T, _ = x.size()  # (B, T, d)
        nH, (_, r2, r3), (_, p2, p3) = self.n_head, self.ranks, self.ranks_post
        G, G_post = self.head_cores()
        # x U2, x U3, x U~3 in one matmul (one wide GEMM runs far better than three narrow ones)
        down = x @ self.down_projection()  # (B, T, r2 + r3 (+ r~3))
        # split, not sliced: the backward of a split is one cat (see GroupedQueryAttention.forward)
        parts = down.split([r2, r3] if self.shared_kv else [r2, r3, p3], dim=-1)
        q_lat, k = parts[0], parts[1]  # (B, T, r2), (B, T, r3)
        # q_i = (x U2) G_i for all heads in one matmul: (B, T, r2) @ (r2, nH r3)
        q = (q_lat @ G.permute(1, 0, 2).reshape(r2, nH * r3)).view(B, T, nH, r3)  # (B, T, nH, r3)
        q_start = cache.pos if cache is not None else 0
        if self.rope:  # latent RoPE: one rotation of the shared key serves every head
            cos, sin = rope_at(rope, q_start, T)  # (T, r3/2)
            q = apply_rope(q, cos[:, None], sin[:, None])  # before the head transpose (no copy)
            if not self.shared_kv:
                k = apply_rope(k, cos, sin)
        q = q.transpose(1, 2)  # (B, nH, T, r3)
        v = k if self.shared_kv else parts[2]  # (B, T, r~3)
        k, v = k.unsqueeze(1), v.unsqueeze(1)  # (B, 1, T, r3), (B, 1, T, r~3)
        if cache is not None:
            if self.shared_kv:
                k = v = cache.append(kv=k)["kv"]  # (B, 1, S, r3)
            else:
                kv = cache.append(k=k, v=v)
                k, v = kv["k"], kv["v"]  # (B, 1, S, r3), (B, 1, S, r~3)
        if self.rope and self.shared_kv:
            # the one latent serves as key (rotated) and value (not): cache it unrotated and
            # rotate the S keys at positions 0 .. S-1 as they are read
            k = apply_rope(k, *rope_at(rope, 0, k.size(2)))
        o = _attend(q, k, v, scale=1.0 / math.sqrt(self.head_dim),
                    dropout_p=self.dropout if self.training else 0.0, q_start=q_start)  # (B, nH, T, r~3)
        # sum_i o_i G~_i^T as one matmul: (B, T, nH r~3) @ (nH r~3, r~2)
        o = o.transpose(1, 2).reshape(B, T, nH * p3)
        y = (o @ G_post.transpose(1, 2).reshape(nH * p3, p2)) @ self.U2_post.t()  # (B, T, d)
        if self.bias is not None:
            y = y + self.bias
        return self.resid_dropout(y)

    def build_inference_form(self) -> Dict[str, torch.Tensor]:
        """Tucker for decoding, contracted once per weight version (not per step):
        W_down = [U2 | U3 | U~3] (d, r2 + r3 + r~3), one matmul of x;
        G_q = G as (r2, nH r3): q_i = (x U2) G_i for every head in one matmul;
        G_o = G~ as (nH r~3, r~2) and U~2^T (r~2, d): the output core and the output basis,
        y = (sum_i o_i G~_i^T) U~2^T as two matmuls (the factors are fewer bytes than their product)."""
        nH, (_, r2, r3), (_, p2, p3) = self.n_head, self.ranks, self.ranks_post
        G, G_post = self.head_cores()
        # the (K, N) matrices are stored as the transposes of contiguous (N, K) ones: decode_linear's weight tiles
        # read along K (at batch 1 each is one GEMV kernel); cuBLAS takes either layout
        return {"W_down": self.down_projection().t().contiguous().t(),  # (d, r2 + r3 (+ r~3))
                "G": G.contiguous(),  # (nH, r2, r3)
                "G_q": G.permute(1, 0, 2).reshape(r2, nH * r3).t().contiguous().t(),  # (r2, nH r3)
                "G_post": G_post.contiguous(),  # (nH, r~2, r~3)
                "G_o": G_post.transpose(1, 2).reshape(nH * p3, p2).t().contiguous().t(),  # (nH r~3, r~2)
                "U_out": self.U2_post.t()}  # (r~2, d), the transpose of the (d, r~2) parameter

    def build_merged_form(self, form: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """merged_decode's matrices (InferenceForm.merged_form), products taken in float32:
        W_qkv = [U2 G_q | U3 (| U~3)] (d, nH r3 + r3 (+ r~3)); W_out = G_o U~2^T (nH r~3, d)."""
        r2, W_down, dtype = self.ranks[1], form["W_down"], form["W_down"].dtype
        acc = torch.promote_types(dtype, torch.float32)  # bf16 weights: products in float32 (float64 stays)
        W_q = W_down[:, :r2].to(acc) @ form["G_q"].to(acc)  # (d, nH r3)
        # stored as the transposes of contiguous (N, K) matrices: the decode kernels' weight tiles read along K
        W_qkv = torch.cat([W_q.to(dtype), W_down[:, r2:]], dim=1)  # (d, nH r3 + r3 (+ r~3))
        W_out = (form["G_o"].to(acc) @ form["U_out"].to(acc)).to(dtype)  # (nH r~3, d)
        return {"W_qkv": W_qkv.t().contiguous().t(), "W_out": W_out.t().contiguous().t()}

    def cached_kv(self, cache: LayerCache) -> Tuple[torch.Tensor, torch.Tensor]:
        """The whole cache buffers as (key (B, 1, L, r3), value (B, 1, L, r~3)) views."""
        if self.shared_kv:
            return cache.store["kv"], cache.store["kv"]
        return cache.store["k"], cache.store["v"]

    def decode(self, io: DecodeIO, at: DecodePosition, cache: LayerCache) -> "Stream":
        """Static decode step (see GroupedQueryAttention.decode) in the inference form: one down-
        projection matmul, the query core, attention to the ONE latent key/value head, the output
        core and U~2 (the merged form, merged_at(B): the query core inside the projection and the output core
        inside U~2, two matmuls). With shared KV and RoPE the latent is cached unrotated and rotated as read."""
        B = io.x.size(0)
        nH, (_, r2, r3), (_, _, p3) = self.n_head, self.ranks, self.ranks_post
        merged = self.merged_at(B) and not self.fused_decode
        form = self.merged_form() if merged else self.inference_form()
        if merged:  # the query core inside the one projection: q for every head, k (and v) in one matmul
            qkv = io.project(form["W_qkv"].t())  # (B, nH r3 + r3 (+ r~3))
            q, k = qkv[:, :nH * r3].view(B, nH, r3), qkv[:, nH * r3:nH * r3 + r3]  # (B, nH, r3), (B, r3)
            v = k if self.shared_kv else qkv[:, nH * r3 + r3:]  # (B, r~3)
        else:
            down = io.project(form["W_down"].t())  # (B, r2 + r3 (+ r~3)), the norm inside the matmul's kernel
            q_lat, k = down[:, :r2], down[:, r2:r2 + r3]  # (B, r2), (B, r3)
            v = k if self.shared_kv else down[:, r2 + r3:]  # (B, r~3)
            if self.fused_decode and (self.shared_kv or not self.rope):
                # the fused kernel applies G_i to q_lat, rotates q_i (and the cached keys, stored unrotated),
                # attends, and applies G~_i: y_lat = sum_i o_i G~_i^T (B, r~2) in one call
                cache.write_at(at.pos, **({"kv": k.view(B, 1, 1, r3)} if self.shared_kv else
                                          {"k": k.view(B, 1, 1, r3), "v": v.view(B, 1, 1, p3)}))
                k_all, v_all = self.cached_kv(cache)
                y_lat = tucker_decode_attention(q_lat, form["G"], k_all, v_all, form["G_post"], at.length,
                                                scale=1.0 / math.sqrt(self.head_dim),
                                                rope=at.tables if self.rope else None, q_pos=at.pos)
                return io.residual(y_lat, form["U_out"].t(), self.bias)  # the stream
            q = decode_linear(q_lat, form["G_q"].t()).view(B, nH, r3)  # (B, nH, r3)
        k_all, v_all = self.cached_kv(cache)
        # one call: q rotated to at.pos, the new latent key (and value) written into the cache at at.pos, attention.
        # With RoPE a shared latent is cached unrotated (it is also the value) and rotated as read; a separate
        # latent key is rotated once, when it is stored
        # pdl_split: the split kernel may start while the kernel before it finishes where that is G_q's short matmul
        # (factored, K = r2) at up to TUCKER_PDL_SPLIT_ROWS sequences; after a wide projection it costs time
        o = decode_attention(q, k_all, v_all, at.length, scale=1.0 / math.sqrt(self.head_dim),
                             rope=at.tables if self.rope else None, rope_keys="as_read" if self.shared_kv else "stored",
                             rotate_q=self.rope, new_kv=(k.view(B, 1, r3), None if self.shared_kv else v.view(B, 1, p3)),
                             pdl_split=not merged and B <= TUCKER_PDL_SPLIT_ROWS)  # (B, nH, r~3)
        if merged:
            return io.residual(o.reshape(B, nH * p3), form["W_out"].t(), self.bias)  # the stream
        y_lat = decode_linear(o.reshape(B, nH * p3), form["G_o"].t())  # (B, r~2): sum_i o_i G~_i^T
        return io.residual(y_lat, form["U_out"].t(), self.bias)  # the stream

    def flops_per_token(self, ctx: int) -> int:
        d = self.U2.size(0)
        nH, (_, r2, r3), (_, p2, p3) = self.n_head, self.ranks, self.ranks_post
        w = d * r2 + r2 * nH * r3 + d * r3 + (0 if self.shared_kv else d * p3) + nH * p3 * p2 + p2 * d
        return 2 * w + 2 * nH * ctx * (r3 + p3)


ATTENTION = {"mha": GroupedQueryAttention, "gqa": GroupedQueryAttention, "mla": LatentAttention,
             "tucker": TuckerAttention}


# ----------------------------------------------------------------------------------------
# Transformer


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's has no bias=False before 2.1 semantics we rely on)."""
    kind = "layernorm"  # the norm the Triton kernels compute (decode_linear's prologue, fused_norm.add_norm)

    def __init__(self, ndim: int, bias: bool, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """RMSNorm (LLaMA): y = x / sqrt(mean(x^2) + eps) * weight; a weight of d, no bias, no centering."""
    kind = "rmsnorm"  # the norm the Triton kernels compute (decode_linear's prologue, fused_norm.add_norm)

    def __init__(self, ndim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def make_norm(config: GPTConfig) -> nn.Module:
    """The block's and the final norm, as config.norm says (d weights, + d biases for LayerNorm with bias)."""
    if config.norm == "rmsnorm":
        return RMSNorm(config.n_embd, eps=config.norm_eps)
    return LayerNorm(config.n_embd, bias=config.bias, eps=config.norm_eps)


class MLP(nn.Module):
    """GPT-2's MLP: c_proj(gelu(c_fc(x))), d -> hidden (default 4 d) -> d. The GELU is exact (erf), as
    config.gelu says: fused_gelu.gelu (Triton kernels on CUDA, F.gelu elsewhere) or F.gelu."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        if config.gelu == "auto":
            import fused_gelu
            fused_gelu.register_ops()  # the GELU kernels' ops now (where they can run), before torch.compile traces
            self.gelu = fused_gelu.gelu
        else:
            self.gelu = F.gelu
        hidden = config.mlp_hidden_dim
        self.c_fc = nn.Linear(config.n_embd, hidden, bias=config.bias)
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))  # (B, T, d) via (B, T, hidden)

    def decode(self, io: DecodeIO) -> "Stream":
        """The stream x + mlp(norm(x)): at batch 1 on CUDA two kernels, norm + c_fc + GELU and c_proj + residual."""
        h = io.project(self.c_fc.weight, self.c_fc.bias, act="gelu")  # (B, hidden)
        return io.residual(h, self.c_proj.weight, self.c_proj.bias)

    def init_out_proj(self, out_std: float) -> None:
        """The residual output projection gets std s_o (every Linear already got N(0, s))."""
        _normal_(self.c_proj.weight, out_std)

    def flops_per_token(self) -> int:
        """Forward FLOPs per token: two d x hidden matmuls."""
        return 2 * 2 * self.c_fc.in_features * self.c_fc.out_features


class SwiGLU(nn.Module):
    """LLaMA's MLP: w2(silu(w1 x) * w3 x); w1, w3: d -> hidden, w2: hidden -> d (the output projection)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        d, hidden = config.n_embd, config.mlp_hidden_dim
        self.w1 = nn.Linear(d, hidden, bias=config.bias)  # gate
        self.w3 = nn.Linear(d, hidden, bias=config.bias)  # up
        self.w2 = nn.Linear(hidden, d, bias=config.bias)  # down, residual output
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.w2(F.silu(self.w1(x)) * self.w3(x)))

    def decode(self, io: DecodeIO) -> "Stream":
        """The stream x + mlp(norm(x)): at batch 1 on CUDA two kernels, norm + w1, w3 + the gate and w2 + residual."""
        h = io.project(self.w1.weight, self.w1.bias, act="swiglu", weight2=self.w3.weight, bias2=self.w3.bias)
        return io.residual(h, self.w2.weight, self.w2.bias)

    def init_out_proj(self, out_std: float) -> None:
        _normal_(self.w2.weight, out_std)

    def flops_per_token(self) -> int:
        """Forward FLOPs per token: three d x hidden matmuls (the gating product is elementwise)."""
        return 2 * 3 * self.w1.in_features * self.w1.out_features


MLPS = {"gelu": MLP, "swiglu": SwiGLU}


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = make_norm(config)
        self.attn = ATTENTION[config.attn](config)
        self.ln_2 = make_norm(config)
        self.mlp = MLPS[config.mlp](config)

    def forward(self, x, rope, cache: Optional[LayerCache] = None):
        x = x + self.attn(self.ln_1(x), rope, cache)
        return x + self.mlp(self.ln_2(x))

    def decode(self, stream: Stream, at: DecodePosition, cache: LayerCache) -> Stream:
        """The decode step of this block on the residual stream (x (B, d), pending delta or None): each norm is
        fused with the matmul after it or with the residual add before it (DecodeIO). Returns the new stream."""
        stream = self.attn.decode(DecodeIO(stream, self.ln_1), at, cache)
        return self.mlp.decode(DecodeIO(stream, self.ln_2))


DECODE_CHOICES = ("auto", "eager", "graph", "mega")
# torch.compile modes of the decode step (GPT.generate's compile_mode -> torch.compile's mode): the step is
# captured in our own CUDA graph, so inductor must not add its own ('-no-cudagraphs'). max-autotune lets
# inductor pick Triton GEMMs with the elementwise work fused into their epilogues (before session 8 an H200
# GPT-2 step 0.04-0.08 ms faster at batch 1, results/bench/LOG.md). The uncompiled step now fuses its
# matmuls' neighbours itself (decode_linear, opaque to inductor), so compiling buys little at small batch
DECODE_COMPILE_MODES = {"default": None, "max-autotune": "max-autotune-no-cudagraphs"}


# Inductor settings for compiling a training step, on top of its compile mode's own (torch.compile's options).
# Off: the "mix-order reduction" of recent torch, which computes a layer norm's backward and its weight gradient
# in one kernel (leaving partial sums to an aten sum) but then casts the incoming gradient to bf16 for the next
# matmuls in a kernel of its own (24 a GPT-2 step, 0.30 ms on an H200). Without it the cast joins the norm's
# backward and the weight gradient is a Triton reduction: 0.31 ms less kernel time, a GPT-2 step 0.9-1.7%
# faster for MHA and Tucker alike in two calls (results/bench/LOG.md, session 11). A key this torch does
# not know is left out.
TRAIN_INDUCTOR_OPTIONS = {"triton.mix_order_reduction": False}


def train_compile_options(compile_mode: str, overrides: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    """torch.compile(model, options=...) for a training step: compile_mode's options (as mode=compile_mode
    sets them), TRAIN_INDUCTOR_OPTIONS, then `overrides` (e.g. a benchmark's A/B switch)."""
    from torch._inductor import config, list_mode_options
    known = config.get_config_copy()
    options = dict(list_mode_options(compile_mode))
    options.update({k: v for k, v in TRAIN_INDUCTOR_OPTIONS.items() if k.replace("-", "_") in known})
    for key, value in (overrides or {}).items():
        if key.replace("-", "_") not in known:
            raise ValueError(f"inductor option {key!r} is unknown to torch {torch.__version__}")
        options[key] = value
    return options


def check_compile_mode(compile_mode: str) -> None:
    if compile_mode not in DECODE_COMPILE_MODES:
        raise ValueError(f"compile_mode={compile_mode!r} is unknown: allowed "
                         f"{', '.join(map(repr, DECODE_COMPILE_MODES))}")


def check_decode(decode: str, device: torch.device, compile: bool, use_cache: bool) -> None:
    """GPT.generate's decode choice (sample.py's --decode) against the rest of the call, by name: a ValueError."""
    if decode not in DECODE_CHOICES:
        raise ValueError(f"decode={decode!r} is unknown: allowed {', '.join(map(repr, DECODE_CHOICES))}")
    if decode == "mega" and (compile or not use_cache):
        raise ValueError("decode='mega' is the cached step as one kernel: it needs use_cache=True and compile=False")
    if decode in ("graph", "mega") and torch.device(device).type != "cuda":
        raise ValueError(f"decode={decode!r} needs a CUDA device, got device={str(device)!r}: use 'auto' or 'eager'")


def activation_dtype(weight: torch.Tensor) -> torch.dtype:
    """The dtype of linear-layer outputs: autocast's when it is on for the weight's device, else the weight's."""
    device = weight.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype


SAMPLE_BACKENDS = ("auto", "triton", "torch")


class NonFiniteLogits(RuntimeError):
    """generate's error when a step's logits held nan or inf (a broken model or checkpoint): its tokens are garbage."""


GREEDY_BELOW = float(torch.finfo(torch.float32).tiny)  # a temperature below float32's smallest normal number decodes
#   greedily: (logits - max) / temperature in float32 would divide by a rounded 0 (nan), and the softmax of logits
#   scaled by >= 1e38 is the argmax anyway


def sample_next(logits: torch.Tensor, temperature: float, top_k: Optional[int],
                generator: Optional[torch.Generator] = None, vocab_limit: Optional[int] = None,
                finite: Optional[torch.Tensor] = None, backend: str = "auto") -> torch.Tensor:
    """The next token (B,) from logits (B, vocab): argmax at temperature 0 (or below GREEDY_BELOW), else a draw
    from the softmax of logits / temperature over the top_k most likely tokens. vocab_limit: only ids below it
    (a tokenizer's size under the model's padded vocab_size: GPT-2's 50,257 of 50,304, whose padding
    ids decode to nothing).

    The draw is the Gumbel-max form of torch.multinomial's one-sample draw: argmax of (logits - max) /
    temperature - log(q), q ~ Exp(1) from `generator` (multinomial takes the argmax of probs / q: the same
    distribution, without normalizing; the row's max taken off first, so that at a tiny temperature the
    scores stay finite and the noise is not rounded away). No host synchronization, so a CUDA decode loop
    never waits on the CPU: multinomial read two validity checks back to the host every call; here
    `finite`, a bool scalar on the logits' device, is and-ed in place with "the winning score is finite"
    (false for a row with a nan or +inf logit, or nothing left to draw), for the caller to read once at the
    end (GPT.generate does; greedy decoding's flag: the chosen logit is finite). The top_k threshold comes from an
    unsorted top-k of the logits in their own dtype: for bf16 logits the set float(x) / temperature would give
    (division keeps distinct bf16 values apart); for fp32 logits that the division rounds together, ties at the k-th value can differ. On an H200
    at batch 1 with GPT-2's vocabulary the draw took 127 us of GPU time a token with softmax, a sorted fp32
    top-k and multinomial, 67-73 us in this form as torch ops (sessions 33-34), 16 us as fused_sample's kernels (session
    34; results/bench/LOG.md). backend 'auto' (default): on CUDA the
    same draw as two to five Triton kernels (fused_sample: the same noise from `generator`, the same float32 scores,
    so the same token wherever the draw is valid), and the argmax as one (torch.argmax's token, ties and nans
    included; torch's one-row reduction runs on one SM), the torch ops elsewhere; 'triton': the kernels or a
    ValueError; 'torch': the torch ops."""
    if backend not in SAMPLE_BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {SAMPLE_BACKENDS}")
    if not temperature >= 0:  # nan too
        raise ValueError(f"temperature={temperature} must be >= 0 (0: argmax)")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1):
        raise ValueError(f"top_k={top_k!r} must be >= 1, an int (or None: every id)")
    if vocab_limit is not None:
        logits = logits[:, :vocab_limit]  # (B, vocab_limit): an index is the same token id
    kernels = sample_kernels(logits, backend)  # fused_sample, or None for the torch ops
    if temperature < GREEDY_BELOW:  # argmax (bf16 or fp32 as they come: the float conversion is exact)
        if kernels:
            return kernels.argmax(logits, finite)  # (B,), `finite` cleared where a chosen logit is nan or +-inf
        token = logits.argmax(dim=-1)  # (B,)
        if finite is not None:
            finite &= logits.gather(1, token[:, None]).isfinite().all()
        return token
    # the noise of the draw, the same for both forms: (B, V) float32 ~ Exp(1) from `generator`
    q = torch.empty(logits.shape, dtype=torch.float32, device=logits.device).exponential_(1, generator=generator)
    if kernels:
        if finite is None:
            finite = torch.ones((), dtype=torch.bool, device=logits.device)
        return kernels.draw(logits, q, temperature, top_k, finite)  # (B,)
    best, token = gumbel_scores(logits, q, temperature, top_k).max(dim=-1)  # (B,), (B,)
    if finite is not None:
        finite &= torch.isfinite(best).all()
    return token


def sample_kernels(logits: torch.Tensor, backend: str):
    """The fused_sample module where sample_next takes its kernels for these logits (backend 'triton', or 'auto' off
    the CPU where they can run), else None (the torch ops); 'triton' where they cannot run is a ValueError."""
    if backend == "torch" or (backend == "auto" and logits.device.type == "cpu"):
        return None
    import fused_sample

    why = fused_sample.unsupported(logits)
    if why is None:
        return fused_sample
    if backend == "triton":
        raise ValueError(f"sample_next(backend='triton'): the sampling kernel cannot run: {why}")
    return None


def gumbel_scores(logits: torch.Tensor, q: torch.Tensor, temperature: float, top_k: Optional[int]) -> torch.Tensor:
    """sample_next's torch form before its argmax: (B, V) float32 log-probability + Gumbel noise up to a constant,
    (logits - row max) / temperature - log(q), -inf outside the top_k largest logits (ties at the k-th value kept).
    q (B, V) float32, q ~ Exp(1), is not modified. A nan or +inf logit makes the row's max nan / +inf, so the whole row
    nan; an all -inf row is nan too. The reference fused_sample's kernels are tested and timed against."""
    masked = None
    if top_k is not None and top_k < logits.size(-1):
        top = torch.topk(logits, top_k, dim=-1, sorted=False).values  # (B, top_k)
        masked = logits < top.amin(dim=-1, keepdim=True)  # (B, V): outside the top_k (ties at the k-th value stay in)
        row_max = top.amax(dim=-1, keepdim=True)  # (B, 1)
    else:
        row_max = logits.amax(dim=-1, keepdim=True)  # (B, 1)
    scores = (logits.float() - row_max.float()) / temperature - q.log()  # (B, V)
    if masked is not None:
        scores.masked_fill_(masked, float("-inf"))
    return scores


class StaticDecoder:
    """Decoding at fixed addresses: the caches, the input token buffer and the position (a (1,)
    long tensor on the device) never move, so GPT.decode_step can be captured once in a CUDA graph
    and replayed for every position: one launch per token instead of hundreds (at batch 1 an eager
    step is launch-bound). The position is advanced inside the graph; `self.pos` mirrors it on the
    host for the context-overflow check, without reading the device.

    prefill(idx) -> logits (B, vocab): reset, run the prompt through forward (flash SDPA over the
    prompt) into the same cache buffers; step(tokens (B, 1)) -> logits: one token per sequence."""

    def __init__(self, model: "GPT", batch_size: int, device=None, use_graph: bool = False,
                 max_len: Optional[int] = None, compile: bool = False, compile_mode: str = "default",
                 mega: bool = False):
        self.model, self.use_graph = model, use_graph
        if mega and compile:
            raise ValueError("StaticDecoder: mega=True (the step as one kernel) and compile=True exclude each other")
        # compile: torch.compile the step (fuses the norms, residual adds, RoPE and GELU into few
        # kernels; attention and the inference form stay opaque calls), then capture it as usual
        check_compile_mode(compile_mode)
        if compile:
            disable_opaque_calls()  # before the trace: the opaque calls skipped, not first made inside it
        self.step_fn = (torch.compile(model.decode_step, dynamic=False, mode=DECODE_COMPILE_MODES[compile_mode])
                        if compile else model.decode_step)
        # the cache holds what the layers compute: under autocast that is autocast's dtype (bf16), not the
        # weights' (fp32): one dtype for q and the cache, as the Triton kernel wants, and half the bytes
        self.caches = model.new_caches(batch_size, max_len, device=device,
                                       dtype=activation_dtype(model.lm_head.weight))
        # mega: the whole step as one persistent kernel (decode_mega.MegaDecoder; it re-points the caches at its
        # stacked buffers), where it can serve the model (a ValueError says why not)
        self.mega = None
        if mega:
            from decode_mega import step_decoder
            self.mega = step_decoder(model, self.caches)  # batch <= 4: GEMV tiles; more: decode_wide's
            self.step_fn = self.mega.decode_step
        device = self.caches[0].store[next(iter(self.caches[0].store))].device
        self.position = torch.zeros(1, dtype=torch.long, device=device)  # where the next token goes
        self.tokens = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        self.pos: Optional[int] = None  # host mirror of `position` (None: nothing prefilled yet)
        self.graph, self.logits = None, None
        # sampling from the step's logits, captured too (sample_graph): (temperature, top_k, vocab_limit,
        # generator) -> (graph, token); `finite` is sample_next's flag for the graphs, reset by generate
        self.samplers: dict = {}
        self.finite = torch.ones((), dtype=torch.bool, device=device)

    def prefill(self, idx: torch.Tensor) -> torch.Tensor:
        for cache in self.caches:
            cache.pos = 0
        logits, _ = self.model(idx, caches=self.caches, last_only=True)
        self.pos = idx.size(1)
        self.position.fill_(self.pos)
        return logits[:, -1, :]

    def _step(self) -> torch.Tensor:
        logits = self.step_fn(self.tokens, self.caches, self.position)
        self.position.add_(1)
        return logits

    def _capture(self) -> None:
        # Warm-up on a side stream (Triton compiles, cuBLAS picks its kernels), then capture. The
        # warm-up steps write the slot at `position` (the real step rewrites it) and advance
        # `position`, so it is put back before the capture (which records and runs nothing).
        saved = self.position.clone()
        device = self.position.device
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._step()
                self.position.copy_(saved)
        torch.cuda.current_stream(device).wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        # autocast's weight-cast cache would hand the graph casts made outside it: capture without it
        autocast = (torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)
                    if torch.is_autocast_enabled("cuda") else nullcontext())
        with torch.cuda.graph(self.graph), autocast:
            self.logits = self._step()
        self.position.copy_(saved)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.pos is None:
            raise RuntimeError("StaticDecoder.step before prefill")
        if self.pos >= self.caches[0].max_len:
            raise ValueError(f"KV cache is full: position {self.pos} >= max_len={self.caches[0].max_len}")
        self.tokens.copy_(tokens)
        if not self.use_graph:
            logits = self._step()
        else:
            if self.graph is None:
                self._capture()
            self.graph.replay()
            logits = self.logits
        self.pos += 1
        return logits

    def sample_graph(self, temperature: float, top_k: Optional[int], generator: Optional[torch.Generator],
                     vocab_limit: Optional[int]) -> torch.Tensor:
        """sample_next over the last replayed step's logits (call it right after step()), as a captured CUDA
        graph of its own: one launch instead of the draw's 4-6 (the noise, the scratch's zeroing and fused_sample's
        kernels; ~10 as torch ops). On an H200 this did not change the sampled rate (session 33: the draw's GPU
        time, not the host's, was the cost); it keeps the host free where a step is shorter than those launches'
        host time (small models). Captured once per (temperature, top_k, vocab_limit, generator), each capture with
        its own memory pool (its noise and scratch: about 0.2 MB a sequence at GPT-2's vocabulary, 1 MB with the
        torch ops' scores), the 8 newest kept; the draws come from `generator` (or the
        default CUDA generator) as eager sample_next's would, the graph advancing its state by the same amount
        each replay (a CUDA test checks tokens and state). Returns the static (B,) token tensor (copy it before
        the next replay), or None where a torch without CUDAGraph.register_generator_state cannot draw from a
        given generator in a graph (then sample eagerly)."""
        if temperature < GREEDY_BELOW:
            top_k, generator = None, None  # argmax: no draw
        key = (temperature, top_k, vocab_limit, generator)
        if key not in self.samplers:
            if self.graph is None:
                raise RuntimeError("StaticDecoder.sample_graph before a captured step")
            if generator is not None and not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
                return None
            graph = torch.cuda.CUDAGraph()
            if generator is not None:
                graph.register_generator_state(generator)  # replays draw from (and advance) this generator
            # a warm-up draw (from a generator of its own: the caller's is not touched): the sampling kernels' first
            # launch compiles and loads them, which a capture must not see
            sample_next(self.logits, temperature, top_k, torch.Generator(device=self.logits.device), vocab_limit,
                        torch.ones((), dtype=torch.bool, device=self.logits.device))
            with torch.cuda.graph(graph):
                token = sample_next(self.logits, temperature, top_k, generator, vocab_limit, self.finite)
            if len(self.samplers) >= 8:  # a caller with a new generator every call: keep the 8 newest graphs
                self.samplers.pop(next(iter(self.samplers)))
            self.samplers[key] = (graph, token)
        graph, token = self.samplers[key]
        graph.replay()
        return token


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        watch_fused_optimizers()  # a fused optimizer's step bumps no version counter: generate must know of it
        self.config = config
        if config.loss_head == "fused":
            import fused_loss
            fused_loss.register_ops()  # the loss kernel's op now (where it can run), before torch.compile traces a step
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd) if config.pos_emb != "rope" else None,
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=make_norm(config),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.transformer.wte.weight = self.lm_head.weight  # weight tying (GPT-2, LLaMA-3 1B)
        if config.pos_emb == "sinusoidal":  # a fixed table where the learned one is: every path that adds wpe
            # (training, the decode steps and their kernels, conversions) adds it; no gradient, so no optimizer state
            self.transformer.wpe.weight.requires_grad_(False)
        if config.pos_emb == "rope":
            cos, sin = self._rope_tables()
            self.register_buffer("rope_cos", cos, persistent=False)  # (block_size, rope_dim / 2)
            self.register_buffer("rope_sin", sin, persistent=False)
        if not self.lm_head.weight.is_meta:  # a meta model holds shapes only (counts, tables): nothing to set, and
            self.init_weights()              # initializing meta tensors one by one takes seconds; after to_empty(), call it

    def _rope_tables(self):
        """RoPE's (cos, sin), each (block_size, rope_dim / 2), for this model's attention and rope_theta."""
        return rope_cache(ATTENTION[self.config.attn].rope_dim(self.config), self.config.block_size,
                          self.config.rope_theta)

    def init_weights(self):
        """GPT-2 scheme: N(0, 0.02), residual output projections N(0, 0.02 / sqrt(2 n_layer)); each
        attention sets its own parameters so that its effective per-head maps match MHA's. Also fills the
        fixed tables (RoPE's, the sinusoidal one), so a model built on the meta device and moved with to_empty()
        is ready after this call."""
        std, out_std = 0.02, 0.02 / math.sqrt(2 * self.config.n_layer)
        if self.config.tie_embeddings:  # again: to_empty() gives the two modules separate tensors
            self.transformer.wte.weight = self.lm_head.weight
        if self.config.pos_emb == "rope":
            cos, sin = self._rope_tables()
            with torch.no_grad():
                self.rope_cos.copy_(cos)  # (block_size, rope_dim / 2)
                self.rope_sin.copy_(sin)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                _normal_(module.weight, std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                _normal_(module.weight, std)
            elif isinstance(module, (LayerNorm, RMSNorm)):  # as built; here for a model moved by to_empty()
                nn.init.ones_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        for block in self.transformer.h:
            block.attn.init_weights(std, out_std)
            block.mlp.init_out_proj(out_std)
        if self.config.pos_emb == "sinusoidal":
            with torch.no_grad():
                self.transformer.wpe.weight.copy_(sinusoidal_table(self.config.block_size, self.config.n_embd))

    # --- forward ---------------------------------------------------------------------------

    def forward(self, idx, targets=None, caches=None, last_only: bool = False):
        """idx (B, T) token ids -> (logits, loss). With `caches` (one LayerCache per layer, from
        `new_caches`) the tokens continue a cached prefix. `last_only` returns logits of the last
        position only (generation); the loss needs targets (B, T), ignore_index -1 (any other target outside
        0 .. vocab_size - 1, e.g. -100, makes the loss nan: a check would read the device every step). Shapes and
        dtypes are checked here (ValueError), never left to an error inside a layer; token ids are not (the
        embedding raises IndexError on the CPU)."""
        if last_only and targets is not None:
            raise ValueError("forward(last_only=True) returns the last position's logits and no loss: drop targets")
        # host-side checks of shapes and dtypes only (no device read; under torch.compile, guards it has anyway)
        if idx.dim() != 2 or idx.dtype not in (torch.long, torch.int32):
            raise ValueError(f"idx of shape {tuple(idx.shape)} and dtype {idx.dtype}: allowed (B, T) token ids of "
                             "dtype torch.long (or torch.int32)")
        if targets is not None and (targets.shape != idx.shape or targets.dtype not in (torch.long, torch.int32)):
            raise ValueError(f"targets of shape {tuple(targets.shape)} and dtype {targets.dtype}: allowed idx's shape "
                             f"{tuple(idx.shape)}, dtype torch.long (or torch.int32), -1 = ignored")
        if caches is not None:
            rows = next(iter(caches[0].store.values())).size(0)
            if len(caches) != len(self.transformer.h) or rows != idx.size(0):
                raise ValueError(f"caches of {len(caches)} layers for {rows} sequences, idx of {idx.size(0)}: allowed "
                                 f"model.new_caches({idx.size(0)}) ({len(self.transformer.h)} layers)")
        T = idx.size(1)  # idx (B, T)
        start = caches[0].pos if caches is not None else 0
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of {start + T} tokens is longer than block_size={self.config.block_size}")
        # (B, T, d) in the norms' dtype: the model's, or float32 where master_adamw made the matrices (wte) bf16
        x = self.transformer.wte(idx).to(self.transformer.ln_f.weight.dtype)
        if self.transformer.wpe is not None:
            x = x + self.transformer.wpe(torch.arange(start, start + T, device=idx.device))
        x = self.transformer.drop(x)
        rope = (self.rope_cos, self.rope_sin) if self.config.pos_emb == "rope" else None
        # (never with caches: a checkpointed block is called without its cache, which would then not be written)
        checkpointed = self.config.activation_checkpointing and self.training and torch.is_grad_enabled() and \
            caches is None
        for i, block in enumerate(self.transformer.h):
            if checkpointed:  # keep only the block's input; its inside is recomputed in the backward
                x = torch.utils.checkpoint.checkpoint(block, x, rope, None, use_reentrant=False)
            else:
                x = block(x, rope, caches[i] if caches is not None else None)
        x = self.transformer.ln_f(x)
        if last_only:  # a slice, not a list index: a list builds a host tensor (breaks graph capture)
            return self.lm_head(x[:, -1:, :]), None
        fused = self.config.loss_head == "fused" and (torch.is_grad_enabled() or self.config.loss_chunk_tokens > 0)
        if targets is not None and fused:  # the loss's gradients computed now: no (B, T, vocab) logits kept
            return None, linear_cross_entropy(x.view(-1, x.size(-1)), self.lm_head.weight, targets.reshape(-1),
                                              self.config.loss_chunk_tokens)
        logits = self.lm_head(x)  # (B, T, vocab)
        loss = None
        if targets is not None:
            loss = cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    # --- KV cache and generation ----------------------------------------------------------

    def new_caches(self, batch_size: int, max_len: Optional[int] = None, device=None, dtype=None):
        """One LayerCache per layer holding only what this variant needs per past token."""
        max_len = max_len or self.config.block_size
        p = next(self.parameters())
        return [LayerCache(block.attn.cache_spec(), batch_size, max_len, device or p.device, dtype or p.dtype)
                for block in self.transformer.h]

    def decode_step(self, idx: torch.Tensor, caches, pos: torch.Tensor) -> torch.Tensor:
        """The static decode step: idx (B, 1) holds one new token per sequence at the position in
        the (1,) long device tensor `pos`; each layer writes its cache entry at `pos` and attends
        to positions 0 .. pos. Returns the logits (B, vocab). Every shape and address is fixed
        and no value goes to the host, so one captured CUDA graph serves every position
        (StaticDecoder). Attention runs through decode_attention (Triton on CUDA, SDPA elsewhere)."""
        x = self.transformer.wte(idx.view(-1)).to(self.transformer.ln_f.weight.dtype)  # (B, d), as in forward
        # the position's embedding (1, d), over the batch: added with the first norm (a pending add)
        stream = (x, self.transformer.wpe(pos).expand_as(x) if self.transformer.wpe is not None else None)
        rope = (self.rope_cos, self.rope_sin) if self.config.pos_emb == "rope" else None
        at = DecodePosition.at(pos, rope, activation_dtype(self.lm_head.weight))  # once per step, not per layer
        for block, cache in zip(self.transformer.h, caches):
            stream = block.decode(stream, at, cache)
        return DecodeIO(stream, self.transformer.ln_f).project(self.lm_head.weight, self.lm_head.bias)  # (B, vocab)

    def note_weight_changes(self) -> None:
        """Bump every parameter's version counter: the inference forms, the kept decoders and the one-launch step's
        stacked weights are keyed on the counters, so they are rebuilt from the weights as they are now. Call it
        after writing weights in a way that bumps no counter, as writes through p.data do (a fused torch optimizer's
        step and a graph_step replay are noted for you: weights_written)."""
        for p in self.parameters():
            torch.autograd.graph.increment_version(p)

    def _catch_up_on_untracked_writes(self) -> None:
        """note_weight_changes once any weights were written untracked (weights_written) since this model last
        looked: a Python integer compared, nothing on the device. The weights written may have been another model's:
        then this one's forms are rebuilt needlessly, once."""
        seen = self.__dict__.get("_untracked_writes_seen", 0)  # plain attribute: not a module or buffer
        if seen != _UNTRACKED_WRITES[0]:
            self.note_weight_changes()
            self.__dict__["_untracked_writes_seen"] = _UNTRACKED_WRITES[0]

    def __getstate__(self):
        """Pickling (torch.save(model), copy.deepcopy, multiprocessing) leaves out the decoders generate keeps: a
        compiled one holds a torch.compile'd step that pickle cannot take (PicklingError after
        generate(compile=True)), and each holds its KV caches; a copy builds its own on its first generate."""
        state = super().__getstate__()
        state.pop("_static_decoders", None)
        return state

    def static_decoder(self, batch_size: int, device, use_graph: bool, compile: bool = False,
                       compile_mode: str = "default", mega: bool = False) -> "StaticDecoder":
        """The StaticDecoder for this batch size, device, activation dtype and mode, kept on the model and
        reused by later generate calls (its caches, and its captured graph: capture and, the first time,
        the Triton compile cost more than a short sample). A new one is made when any weight changed
        since it was built (the graph holds the old inference forms), the activation dtype differs, or it was built
        under torch.inference_mode() and this call is not (its caches and position are inference tensors, which only
        inference mode may write in place)."""
        paths = tuple((getattr(block.attn, "fused_decode", False), getattr(block.attn, "merged_decode", False))
                      for block in self.transformer.h)  # a captured graph holds its layers' decode paths
        key = (batch_size, torch.device(device), activation_dtype(self.lm_head.weight), use_graph, compile,
               compile_mode if compile else "default", paths, mega, torch.is_inference_mode_enabled())
        weights = tuple((p.data_ptr(), p._version) for p in self.parameters())
        decoders = self.__dict__.setdefault("_static_decoders", {})  # plain attribute: not a module or buffer
        entry = decoders.get(key)
        if entry is None or entry[0] != weights:
            decoders.clear()  # at most one set of caches alive: a new key (or new weights) replaces them
            entry = (weights, StaticDecoder(self, batch_size, device=device, use_graph=use_graph, compile=compile,
                                            compile_mode=compile_mode, mega=mega))
            decoders[key] = entry
        return entry[1]

    @torch.no_grad()
    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k: Optional[int] = None,
                 use_cache: bool = True, generator: Optional[torch.Generator] = None, decode: str = "auto",
                 compile: bool = False, compile_mode: str = "default", vocab_limit: Optional[int] = None):
        """Append max_new_tokens tokens to idx (B, T). temperature 0 means greedy (argmax). vocab_limit: sample
        only ids below it (sample.py passes its tokenizer's size: the padded ids above it decode to nothing).

        With the cache: the prompt is prefilled once (flash SDPA over the prompt), then one token
        per step through decode_step. decode='graph' captures that step in a CUDA graph and replays
        it (CUDA only), 'eager' runs it op by op, 'auto' is 'graph' on CUDA and 'eager' elsewhere;
        both run the same kernels, so they give the same tokens. compile=True torch.compiles the
        step first (fewer, fused kernels; a one-time compile of tens of seconds), with torch.compile's
        compile_mode ('default' or 'max-autotune': fewer kernels still, minutes of tuning). decode='mega'
        replays instead the whole step as one persistent kernel (decode_mega at batch <= 4, decode_wide's
        tensor-core tiles at 5-32; CUDA, MHA/GQA/MQA/MLA/Tucker with learned positions or RoPE (not MLA's
        decoupled RoPE) and a GELU MLP, else a ValueError naming why): on an H200 the fastest step for GQA, MQA and
        Tucker at batch 1 and 32 (MQA and Tucker [8,64,64] at 2 too), slower than 'graph' at batch 3-4 and for MHA,
        and its fp32 atomic sums make the logits vary in their last bits from run to run, so greedy tokens may
        differ from 'graph' where two logits nearly tie. When the context reaches block_size the cache is refilled
        from the last block_size // 2 tokens (the uncached path crops the context each step instead, as nanoGPT
        does). Sampling (temperature > 0) never waits on the device inside the loop: whether every step's
        probabilities were finite is read once after it, and a RuntimeError then says they were not (the tokens are
        not returned). The model's mode is left as it is: call model.eval() first where it has dropout (the prefill
        would drop, the decode steps not)."""
        check_decode(decode, idx.device, compile, use_cache)
        check_compile_mode(compile_mode)  # before a kept decoder could be reused
        if idx.dim() != 2 or idx.size(0) == 0 or idx.size(1) == 0 or idx.dtype not in (torch.long, torch.int32):
            raise ValueError(f"idx of shape {tuple(idx.shape)} and dtype {idx.dtype}: allowed (B, T), B >= 1 rows of "
                             "T >= 1 prompt tokens, dtype torch.long (or torch.int32)")
        # the prompt's ids, read once before the loop (on CUDA an id past the embedding is a device-side assert that
        # ends the process's CUDA context; on the CPU an IndexError from inside the embedding)
        low, high = torch.stack(idx.aminmax()).tolist()  # one read
        if low < 0 or high >= self.config.vocab_size:
            raise ValueError(f"idx holds token id {low if low < 0 else high}: allowed "
                             f"0 .. vocab_size - 1 = {self.config.vocab_size - 1}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens={max_new_tokens!r} is out of range: allowed an int >= 0")
        if vocab_limit is not None and not 1 <= vocab_limit <= self.config.vocab_size:
            raise ValueError(f"vocab_limit={vocab_limit} is out of range: allowed 1 .. vocab_size="
                             f"{self.config.vocab_size} (or None: every id)")
        if use_cache:
            self._catch_up_on_untracked_writes()  # weights written with no version bump: forms rebuilt below
        # cuda:N: Triton launches its kernels on the current device, and graphs capture there
        with torch.cuda.device(idx.device) if idx.device.type == "cuda" else nullcontext():
            decoder = None
            if use_cache:
                graph = decode in ("graph", "mega") or (decode == "auto" and idx.device.type == "cuda")
                decoder = self.static_decoder(idx.size(0), idx.device, use_graph=graph, compile=compile,
                                              compile_mode=compile_mode, mega=decode == "mega")
                decoder.pos = None  # a reused decoder starts over: the first token prefills the prompt
            out = torch.empty(idx.size(0), idx.size(1) + max_new_tokens, dtype=idx.dtype, device=idx.device)
            out[:, :idx.size(1)] = idx
            n = idx.size(1)
            finite = decoder.finite.fill_(True) if decoder is not None else \
                torch.ones((), dtype=torch.bool, device=idx.device)
            for _ in range(max_new_tokens):
                token = None
                if decoder is None:
                    logits = self(out[:, max(0, n - self.config.block_size):n], last_only=True)[0][:, -1, :]
                elif decoder.pos is None or decoder.pos >= self.config.block_size:
                    keep = max(1, self.config.block_size // 2) if decoder.pos is not None else self.config.block_size
                    logits = decoder.prefill(out[:, max(0, n - keep):n])
                else:
                    logits = decoder.step(out[:, n - 1:n])
                    if decoder.use_graph:  # the draw replayed from a graph too (None: drawn eagerly below)
                        token = decoder.sample_graph(temperature, top_k, generator, vocab_limit)
                out[:, n] = token if token is not None else sample_next(logits, temperature, top_k, generator,
                                                                        vocab_limit, finite)
                n += 1
            if not finite.item():  # read once, after the loop (multinomial read it every token)
                raise NonFiniteLogits("generate: the model's next-token logits or probabilities contained inf or nan "
                                      "at some step (non-finite logits), so the decoded tokens are meaningless")
            if decoder is not None and decoder.mega is not None:
                decoder.mega.check()  # a grid barrier that gave up would have left garbage: say so
            return out

    # --- accounting (from the instantiated modules, never re-derived from the config) --------

    def attn_params_per_layer(self) -> int:
        return sum(p.numel() for p in self.transformer.h[0].attn.parameters())

    def attn_params(self) -> int:
        return sum(p.numel() for block in self.transformer.h for p in block.attn.parameters())

    def kv_values_per_token_per_layer(self) -> int:
        return sum(heads * dim for heads, dim in self.transformer.h[0].attn.cache_spec().values())

    def kv_cache_bytes(self, seq_len: int, batch_size: int = 1, bytes_per_value: int = 2) -> int:
        per_layer = sum(heads * dim for b in self.transformer.h for heads, dim in b.attn.cache_spec().values())
        return per_layer * seq_len * batch_size * bytes_per_value

    def get_num_params(self, non_embedding: bool = True) -> int:
        """All parameters (a tied wte/lm_head counted once). non_embedding drops the position
        embedding and, when untied, the input embedding wte (a lookup, not a matmul); a tied
        wte stays in, as nanoGPT counts it, because it is also the lm_head's weight."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.transformer.wpe is not None:
            n -= self.transformer.wpe.weight.numel()
        if non_embedding and not self.config.tie_embeddings:
            n -= self.transformer.wte.weight.numel()
        return n

    # --- training helpers ---------------------------------------------------------------------

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type, master_weights: bool = False,
                             micro_steps: int = 1):
        """AdamW; weight decay on matrices, embeddings and cores (dim >= 2), none on biases and
        norm weights (LayerNorm and RMSNorm, all 1-D). master_weights: master_adamw.MasterAdamW, which
        turns this model's matrices into bf16 and keeps their float32 masters (train.py's master_weights);
        micro_steps: the backward passes per step (> 1: their gradients summed in float32)."""
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        if master_weights:
            from master_adamw import MasterAdamW
            return MasterAdamW(groups, lr=learning_rate, betas=betas, micro_steps=micro_steps)
        fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **({"fused": True} if fused else {}))

    def flops_per_token(self, ctx: Optional[int] = None) -> int:
        """Forward + backward FLOPs per token (3x forward): every layer's own matmul count (Tucker's
        cores and absorbed MLA are not 2 x params), the MLP (2 d x hidden matmuls for gelu, 3 for
        swiglu), and the lm_head. Attention scores count the full context ctx (nanoGPT's
        convention, no causal halving); norms and elementwise ops are not counted."""
        ctx = ctx or self.config.block_size
        d, V = self.config.n_embd, self.config.vocab_size
        block = self.transformer.h[0]
        per_layer = block.attn.flops_per_token(ctx) + block.mlp.flops_per_token()
        return 3 * (self.config.n_layer * per_layer + 2 * d * V)

    def estimate_mfu(self, tokens_per_iter: int, dt: float, peak_flops: float, ctx: Optional[int] = None) -> float:
        """Model FLOPs utilization: achieved FLOP/s over `peak_flops` (e.g. 790e12 for bf16 on H200)."""
        return self.flops_per_token(ctx) * tokens_per_iter / dt / peak_flops

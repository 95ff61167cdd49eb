"""
Convert a trained MHA GPT (a train.py checkpoint, or Hugging Face GPT-2) into GQA, MLA or Tucker
attention, the way the paper initializes its low-rank models from pretrained MHA (appendix
app_vit, "Converting pretrained MHA parameters"):

    python -m scripts.convert --in_dir=out-mha --to=tucker --ranks=8,64,64 --out_dir=out-mha2tucker
    python -m scripts.convert --in_dir=out-mha --to=tucker --ranks=8,64,64 --shared_kv --out_dir=...
    python -m scripts.convert --in_dir=out-mha --to=gqa --n_kv_head=2 --out_dir=out-mha2gqa2
    python -m scripts.convert --in_dir=out-mha --to=mla --kv_rank=128 [--q_rank=128] [--shared_kv] --out_dir=...
    python -m scripts.convert --hf=gpt2 --to=tucker --ranks=8,64,64 --out_dir=out-gpt2-tucker  # needs transformers
    ... --data_dir=data/shakespeare --eval_batches=20     # val loss before and after conversion

What each conversion does (math convention: x is a row vector, q = x W_Q; nn.Linear stores W^T):

  MHA -> GQA (nG)   W_Q, W_O unchanged; keep K/V heads 0, nH/nG, 2 nH/nG, ... (the first head of
                    each group keeps its own key and value; exact when nG = nH).
  MHA -> MLA        truncated SVD W = U S V^T of W_Q (d x d), W_K, W_V at rank dcQ / dcK:
                    down = U_r (orthonormal columns: a unit-gain latent, as model.py's MLA init
                    has), up = U_r^T W = S_r V_r^T (the least-squares up-projection for that
                    down-projection). Shared KV (paper: "discard the value down-projection and use
                    the key down-projection"): W_DKV = U_K,r and W_UV = U_K,r^T W_V, the least-squares
                    fit of W_V through the key latent (our reading: the paper does not say how W_UV is
                    chosen). W_O is kept. Exact at dcQ = dcK = d.
  MHA -> Tucker     HOSVD of W (nH, d, d), W_i = W_Q,i W_K,i^T, and of W~ (nH, d, d),
                    W~_i = (W_V,i W_O,i)^T, at ranks (r1, r2, r3) / (r~1, r~2, r~3): U_j = leading
                    left singular vectors of Mat_j, core = T x1 U1^T x2 U2^T x3 U3^T. Shared KV
                    (paper: "sharing U3 between the Tucker factorizations"): U3 = U~3 = leading left
                    singular vectors of [Mat_3(W) / |W|, Mat_3(W~) / |W~|] (each tensor normalized so
                    that neither dominates by its scale). model.py's Tucker uses MHA's scale
                    1/sqrt(dH), so at full ranks (nH, d, d) the converted model is MHA exactly.
  Biases (GPT-2)    GQA / MLA keep every bias exactly (MLA: in the up-projections). Tucker has only
                    an output bias: the value bias folds into it exactly (softmax rows sum to one,
                    b_out += sum_i b_V,i W_O,i), the key bias drops exactly (it shifts all scores of a
                    query equally), the query bias is dropped and that is NOT exact (it adds
                    b_Q,i W_K,i^T x_n to the scores); its size is reported per layer.

Nothing here forms a d x d slice per head: every attention tensor is kept in factored form
T_i = (P a_i)(Q b_i)^T with small inner dimension (dH, or r3 for Tucker), and the mode 2 and 3
singular vectors come from SVDs of small "half" matrices (see `Factored`). The head mode (mode 1)
is the one exception: up to DENSE_LIMIT entries its unfolding, nH x (p q) with p, q the factors'
inner widths, is formed for an exact SVD (7.1M entries for GPT-2's MHA); beyond it the nH x nH
Gram matrix serves. At d = 2048, nH = 32 the largest decomposition is one d x d SVD per mode.

Out: out_dir/ckpt.pt in train.py's checkpoint format (iteration 0, best val loss inf, a fresh
AdamW state built with --weight_decay/--beta1/--beta2), so that `sample.py --out_dir=...` samples
from it and `train.py ... --init_from=resume --out_dir=...` fine-tunes it; and out_dir/convert.json
with the per-layer reconstruction errors and the val losses.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import warnings
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

import torch

if not __package__:  # run as a file, the repository's modules are not importable
    sys.exit("run from the repository root as a module: python -m scripts.convert ...")

from model import GPT, GPTConfig, LatentAttention, TuckerAttention  # noqa: E402
from checkpoint import load_checkpoint, write_json  # noqa: E402  (load_checkpoint re-exported: convert.load_checkpoint)
from configurator import check_device, make_current  # noqa: E402
from evaluate import check_token_file, split_loss  # noqa: E402
from tensor_forms import _concat_heads, head_factors, with_attention  # noqa: E402

Tensor = torch.Tensor

# Mode-1 (head) spectra: form the core nH x (p q) explicitly (an exact SVD, no squaring of
# singular values) up to this many entries; beyond it use the nH x nH Gram matrix, whose
# eigenvalues resolve singular values only down to ~1e-8 of the largest (sqrt of float64 eps).
DENSE_LIMIT = 2 ** 24


# ----------------------------------------------------------------------------------------
# Attention tensors in factored form


@dataclass
class Factored:
    """A per-head tensor T (nH, d, d) held as T_i = (P a_i)(Q b_i)^T, never formed.

    a: (nH, p, k), b: (nH, q, k), P: (d, p), Q: (d, q); None means the identity (p = d, q = d).
    MHA/GQA: P = Q = I, a_i = W_Q,i, b_i = W_K,i (k = dH). MLA: P = W_DQ, a_i = W_UQ,i, Q = W_DK,
    b_i = W_UK,i. Tucker: P = U2, a_i = G_i = (C x1 U1)_i, Q = U3, b_i = I (k = r3).
    With P, Q orthonormal (see `orthonormal`) every unfolding of T is an orthonormal map applied
    to a small matrix built from a, b, which has the same singular values and left vectors."""
    a: Tensor
    b: Tensor
    P: Optional[Tensor] = None
    Q: Optional[Tensor] = None

    @property
    def n_head(self) -> int:
        return self.a.size(0)

    @property
    def dim(self) -> int:
        return self.P.size(0) if self.P is not None else self.a.size(1)

    def A(self) -> Tensor:
        """Left factors P a_i in model coordinates: (nH, d, k)."""
        return self.a if self.P is None else self.P @ self.a

    def B(self) -> Tensor:
        """Right factors Q b_i: (nH, d, k)."""
        return self.b if self.Q is None else self.Q @ self.b

    def dense(self) -> Tensor:
        """The tensor itself (nH, d, d): only for tests and tiny models."""
        return self.A() @ self.B().transpose(1, 2)

    def transposed(self) -> "Factored":
        """T_i^T: swaps modes 2 and 3."""
        return Factored(self.b, self.a, self.Q, self.P)

    def to(self, dtype) -> "Factored":
        conv = lambda t: None if t is None else t.to(dtype)
        return Factored(conv(self.a), conv(self.b), conv(self.P), conv(self.Q))

    def orthonormal(self) -> "Factored":
        """The same tensor with orthonormal P, Q: P = Q_P R_P (reduced QR), a_i <- R_P a_i."""
        a, b, P, Q = self.a, self.b, self.P, self.Q
        if P is not None:
            P, R = torch.linalg.qr(P)  # (d, p'), (p', p)
            a = R @ a  # (nH, p', k)
        if Q is not None:
            Q, R = torch.linalg.qr(Q)
            b = R @ b
        return Factored(a, b, P, Q)

    @torch.no_grad()
    def norm(self) -> float:
        """|T|_F from the head Gram matrix (its trace)."""
        return math.sqrt(max(float(head_gram(self.a, self.b, self.P, self.Q).trace()), 0.0))


def head_gram(a: Tensor, b: Tensor, P: Optional[Tensor] = None, Q: Optional[Tensor] = None) -> Tensor:
    """G[j, l] = <T_j, T_l>_F = <A_j^T A_l, B_j^T B_l>_F for T_i = (P a_i)(Q b_i)^T: (nH, nH),
    from the (nH k) x (nH k) Gram matrices of the factors (never a d x d slice)."""
    def factor_gram(x, basis):  # x: (nH, p, k) -> (nH, k, nH, k) of x_j^T M x_l, M = basis^T basis
        nH, p, k = x.shape
        flat = x.permute(1, 0, 2).reshape(p, nH * k)  # (p, nH k)
        if basis is not None:
            flat = basis @ flat  # (d, nH k)
        return (flat.t() @ flat).view(nH, k, nH, k)
    return (factor_gram(a, P) * factor_gram(b, Q)).sum(dim=(1, 3))  # (nH, nH)


def factored_tensors(attn) -> Tuple[Factored, Factored]:
    """W and W~ of an attention layer in factored form: the semantics of
    tensor_forms.attention_tensors (W_i = W_Q,i W_K,i^T, W~_i = (W_V,i W_O,i)^T), without
    forming them. Decoupled-RoPE MLA: the semantic (non-rotary) part only, as attention_tensors. In float64,
    Tucker's head cores G_i = (C x1 U1)_i taken there: formed in a float32 checkpoint's own dtype, their rounding
    gives the head mode singular values at ~1e-8 past r1 (the cliff the paper's head-mode figure shows)."""
    w = {k: v.to(torch.float64) if v is not None else None for k, v in attn.per_head_weights().items()}
    if isinstance(attn, TuckerAttention):
        # W_i = U2 G_i U3^T and W~_i = U~2 G~_i U~3^T
        G = torch.einsum("ha,abc->hbc", w["U1"], w["core"])  # (nH, r2, r3)
        G_post = torch.einsum("ha,abc->hbc", w["U1_post"], w["core_post"])  # (nH, r~2, r~3)
        eye = lambda n: torch.eye(n, dtype=G.dtype, device=G.device).expand(G.size(0), n, n)
        return (Factored(G, eye(G.size(2)), w["U2"], w["U3"]),
                Factored(G_post, eye(G_post.size(2)), w["U2_post"], w["U3_post"]))
    Wo_T = w["W_O"].transpose(1, 2)  # (nH, d, dH): W_O,i^T
    if isinstance(attn, LatentAttention):  # P = W_DQ (None: full query), a_i = W_UQ,i; Q = W_DK, b_i = W_UK,i
        return (Factored(w["W_UQ"], w["W_UK"], w["W_DQ"], w["W_DK"]),
                Factored(Wo_T, w["W_UV"], None, w["W_DV"]))
    Wq, Wk, Wv, _ = head_factors(attn)  # (nH, d, dH) each; GQA's K/V repeated per query head
    return (Factored(Wq, Wk).to(torch.float64), Factored(Wo_T, Wv).to(torch.float64))


def _complete(U: Tensor, r: int) -> Tensor:
    """U (n, m) orthonormal columns -> (n, r): its first r columns, or U extended by an
    orthonormal basis of its complement (directions of singular value 0) when r > m."""
    n, m = U.shape
    if r <= m:
        return U[:, :r]
    Q = torch.linalg.qr(U, mode="complete")[0]  # (n, n), Q[:, :m] = U up to column signs
    return torch.cat([U, Q[:, m:r]], dim=1)


def _left_svd(X: Tensor, vectors: bool) -> Tuple[Tensor, Optional[Tensor]]:
    """Singular values (and left singular vectors) of X (n, m). A wide X is first reduced to the
    n x n factor R^T of X^T = Q R (same singular values and left vectors, no squaring)."""
    if X.size(1) > X.size(0):
        X = torch.linalg.qr(X.t(), mode="r")[1].t()  # (n, n)
    if not vectors:
        return torch.linalg.svdvals(X), None
    U, S, _ = torch.linalg.svd(X, full_matrices=False)
    return S, U


def mode_half(f: Factored, mode: int) -> Tuple[Optional[Tensor], Tensor]:
    """(basis, X) with Mat_mode(T) = basis X V^T for some V with orthonormal columns, f orthonormal.

    Mode 2: Mat_2(T) = [A_1 B_1^T | ... | A_nH B_nH^T] (d, nH d). With b_i = Q_i R_i (reduced QR),
    A_i B_i^T = P (a_i R_i^T) (Q Q_i)^T, and the blocks Q Q_i have orthonormal columns, so
    X = [a_1 R_1^T | ... | a_nH R_nH^T] (p, nH k) and basis = P. Mode 3 is mode 2 of T_i^T."""
    if mode == 3:
        return mode_half(f.transposed(), 2)
    if mode != 2:
        raise ValueError(f"mode_half is for modes 2 and 3, got {mode}")
    R = torch.linalg.qr(f.b, mode="r")[1]  # (nH, min(q, k), k)
    X = f.a @ R.transpose(1, 2)  # (nH, p, min(q, k))
    return f.P, X.permute(1, 0, 2).reshape(X.size(1), -1)  # (p, nH min(q, k))


@torch.no_grad()
def mode_svd(f: Factored, mode: int, rank: int = 0, dense_limit: int = DENSE_LIMIT):
    """Singular values of Mat_mode(T), all min(rows, cols) of them (zeros included, descending),
    and with rank > 0 the `rank` leading left singular vectors in model coordinates:
    mode 1: (nH, rank), modes 2 and 3: (d, rank)."""
    f = f.orthonormal()
    nH, d = f.n_head, f.dim
    if mode == 1:
        p, q = f.a.size(1), f.b.size(1)
        if nH * p * q <= dense_limit:
            K = (f.a @ f.b.transpose(1, 2)).reshape(nH, p * q)  # Mat_1 of the core in the P, Q bases
            S, U = _left_svd(K, vectors=rank > 0)
        else:  # nH x nH Gram <T_j, T_l>: eigenvalues are the squared singular values
            evals, evecs = torch.linalg.eigh(head_gram(f.a, f.b))
            S, U = evals.flip(0).clamp_min(0).sqrt(), evecs.flip(1)
        basis, full = None, min(nH, d * d)
    elif mode in (2, 3):
        basis, X = mode_half(f, mode)
        S, U = _left_svd(X, vectors=rank > 0)
        full = d  # Mat_2, Mat_3: d x (nH d)
    else:
        raise ValueError(f"mode must be 1, 2 or 3, got {mode}")
    S = torch.cat([S, S.new_zeros(max(0, full - S.numel()))])[:full]
    if rank <= 0:
        return S, None
    U = U[:, :rank]
    if basis is not None:
        U = basis @ U  # back to model coordinates
    return S, _complete(U, rank)


@torch.no_grad()
def shared_mode3_basis(f: Factored, f_post: Factored, rank: int) -> Tensor:
    """U3 = U~3 for shared KV: leading left singular vectors of [Mat_3(W)/|W|, Mat_3(W~)/|W~|] (d, rank).
    Each half X has |X|_F = |T|_F, so the normalization comes for free."""
    halves = []
    for t in (f.orthonormal(), f_post.orthonormal()):
        basis, X = mode_half(t, 3)
        X = X if basis is None else basis @ X  # (d, m)
        n = X.norm()
        halves.append(X / n if n > 0 else X)
    _, U = _left_svd(torch.cat(halves, dim=1), vectors=True)
    return _complete(U[:, :rank], rank)


# ----------------------------------------------------------------------------------------
# HOSVD


def tucker_core(f: Factored, U1: Tensor, U2: Tensor, U3: Tensor) -> Tensor:
    """C = T x1 U1^T x2 U2^T x3 U3^T (r1, r2, r3), head by head: (U2^T A_i)(U3^T B_i)^T."""
    per_head = (U2.t() @ f.A()) @ (U3.t() @ f.B()).transpose(1, 2)  # (nH, r2, r3)
    return torch.einsum("ia,ibc->abc", U1, per_head)


@torch.no_grad()
def projection_error(f: Factored, U1: Tensor, U2: Tensor, U3: Tensor) -> float:
    """|T - T x1 P1 x2 P2 x3 P3|_F / |T|_F with P_j = U_j U_j^T (U_j orthonormal): the error of the
    Tucker approximation whose core is `tucker_core`.

    The residual is the sum of three mutually orthogonal pieces, T x1 (I-P1), (T x1 P1) x2 (I-P2)
    and (T x1 P1 x2 P2) x3 (I-P3); each squared norm is a head Gram of *small* residual factors,
    so the result stays accurate when the error is ~1e-16 (|T|^2 - |C|^2 would stall at ~1e-8)."""
    A, B = f.A(), f.B()  # (nH, d, k)
    eye = torch.eye(U1.size(0), dtype=U1.dtype, device=U1.device)
    C1 = eye - U1 @ U1.t()
    P1 = U1 @ U1.t()
    G = head_gram(A, B)
    e1 = ((C1.t() @ C1) * G).sum()
    A_res = A - U2 @ (U2.t() @ A)  # (I - P2) A_i
    e2 = ((P1.t() @ P1) * head_gram(A_res, B)).sum()
    B_res = B - U3 @ (U3.t() @ B)  # (I - P3) B_i
    e3 = ((P1.t() @ P1) * head_gram(U2.t() @ A, B_res)).sum()
    total = float(G.trace())
    return math.sqrt(max(float(e1 + e2 + e3), 0.0) / total) if total > 0 else 0.0


@torch.no_grad()
def difference_error(f: Factored, g: Factored) -> float:
    """|T - T'|_F / |T|_F for two factored tensors with the same k, through
    T_i - T'_i = (A_i - A'_i) B_i^T + A'_i (B_i - B'_i)^T: small factors, accurate when T' ~ T."""
    A, B, A2, B2 = f.A(), f.B(), g.A(), g.B()
    diff = head_gram(torch.cat([A - A2, A2], dim=2), torch.cat([B, B - B2], dim=2))
    total = float(head_gram(A, B).trace())
    return math.sqrt(max(float(diff.trace()), 0.0) / total) if total > 0 else 0.0


@torch.no_grad()
def gram_error(f: Factored, g: Factored) -> float:
    """|T - T'|_F / |T|_F for factored tensors of any k (Tucker's r3 against MHA's dH), from the head Gram matrix of
    T - T' = [A, A'] [B, -B']^T: |T|^2 + |T'|^2 - 2 <T, T'> in float64, which cancels to ~1e-8 of |T|, so for
    errors well above that (a 16-bit checkpoint's storage rounding, ~1e-3); difference_error where the k agree."""
    A = torch.cat([f.A(), g.A()], dim=2)
    B = torch.cat([f.B(), -g.B()], dim=2)
    total = float(head_gram(f.A(), f.B()).trace())
    return math.sqrt(max(float(head_gram(A, B).trace()), 0.0) / total) if total > 0 else 0.0


def hosvd(f: Factored, ranks: Sequence[int], U3: Optional[Tensor] = None):
    """HOSVD factors (U1, U2, U3) and core of f at `ranks` (U3 given: shared KV)."""
    U1 = mode_svd(f, 1, ranks[0])[1]
    U2 = mode_svd(f, 2, ranks[1])[1]
    if U3 is None:
        U3 = mode_svd(f, 3, ranks[2])[1]
    return U1, U2, U3, tucker_core(f, U1, U2, U3)


# ----------------------------------------------------------------------------------------
# Conversions (every one: float64 arithmetic, the result in the source's dtype)


def _check_source(model: GPT, to: str, allow_rope_change: bool):
    c = model.config
    if not (c.attn == "mha" or (c.attn == "gqa" and to == "tucker")):
        raise ValueError(f"the source must be an MHA model{' (or GQA for --to=tucker)' if to == 'tucker' else ''}, "
                         f"got attn={c.attn!r}")
    if c.pos_emb == "rope" and to in ("mla", "tucker") and not allow_rope_change:
        raise ValueError(f"the source uses RoPE in the head dimension; {to} rotates in its latent instead, so the "
                         "conversion would not be exact: pass --allow_rope_change to convert anyway "
                         f"({'latent' if to == 'mla' else 'Tucker latent'} RoPE, fine-tune afterwards)")


def _weights64(attn) -> Dict[str, Optional[Tensor]]:
    """attn.per_head_weights() in float64 (copies)."""
    return {k: None if v is None else v.detach().double() for k, v in attn.per_head_weights().items()}


def _split_heads(M: Tensor, n: int) -> Tensor:
    """(r, n k) -> (n, r, k): column block i of M is head i's map."""
    return M.reshape(M.size(0), n, -1).transpose(0, 1)


def target_config(c: GPTConfig, to: str, *, ranks=None, ranks_post=None, n_kv_head=None, kv_rank=None, q_rank=None,
                  shared_kv=False, allow_rope_change=False) -> GPTConfig:
    """The converted model's GPTConfig for source config `c` (convert's keywords): a ValueError naming the key where
    the target does not fit the source (ranks past the model's sizes, nH % nG), before any weight is touched."""
    del allow_rope_change  # the sources' check (_check_source), not the target's
    if to == "gqa":
        return replace(c, attn="gqa", n_kv_head=n_kv_head)  # validates nH % nG
    if to == "mla":
        return replace(c, attn="mla", n_kv_head=None, kv_rank=kv_rank, q_rank=q_rank, shared_kv=shared_kv,
                       mla_rope="latent" if c.pos_emb == "rope" else c.mla_rope)
    if to == "tucker":
        ranks = tuple(ranks)
        return replace(c, attn="tucker", n_kv_head=None, tucker_ranks=ranks,
                       tucker_ranks_post=tuple(ranks_post) if ranks_post is not None else ranks,
                       shared_kv=shared_kv)  # validates the ranks (and shared r3)
    raise ValueError(f"--to={to!r} is unknown: allowed 'gqa', 'mla', 'tucker'")


@torch.no_grad()
def mha_to_gqa(model: GPT, n_kv_head: int):
    """MHA -> GQA(nG): keep K/V heads 0, g, 2g, ... with g = nH / nG (the paper's choice)."""
    _check_source(model, "gqa", True)
    c = model.config
    config = target_config(c, "gqa", n_kv_head=n_kv_head)
    keep = torch.arange(0, c.n_head, c.n_head // n_kv_head)  # (nG,) head indices
    attention, layers = [], []
    for block in model.transformer.h:
        w = _weights64(block.attn)
        for name in ("W_K", "W_V", "b_K", "b_V"):  # (nH, ...) -> the kept heads (nG, ...)
            w[name] = None if w[name] is None else w[name][keep]
        attention.append(w)
        layers.append(dict(keep_heads=keep.tolist()))
    return with_attention(model, config, attention), layers


def _svd_split(W: Tensor, r: int) -> Tuple[Tensor, Tensor]:
    """W (d, n) ~ down @ up with down = U_r (d, r) orthonormal, up = U_r^T W = S_r V_r^T (r, n)."""
    U = torch.linalg.svd(W, full_matrices=False)[0]
    down = _complete(U[:, :r], r)
    return down, down.t() @ W


@torch.no_grad()
def mha_to_mla(model: GPT, kv_rank: int, q_rank: Optional[int] = None, shared_kv: bool = False,
               allow_rope_change: bool = False):
    """MHA -> MLA by truncated SVD of W_Q (if q_rank), W_K, W_V; W_O kept (module docstring)."""
    _check_source(model, "mla", allow_rope_change)
    c = model.config
    config = target_config(c, "mla", kv_rank=kv_rank, q_rank=q_rank, shared_kv=shared_kv)
    nH = c.n_head
    attention, layers = [], []
    for block in model.transformer.h:
        w = _weights64(block.attn)
        Wq, Wk, Wv = (_concat_heads(w[n]) for n in ("W_Q", "W_K", "W_V"))  # (d, d) each
        new = dict(W_O=w["W_O"], b_O=w["b_O"])
        if q_rank is None:
            new["W_UQ"] = w["W_Q"]  # the full d x d query
        else:
            down, up = _svd_split(Wq, q_rank)  # W_DQ (d, dcQ), [W_UQ,1 | ... | W_UQ,nH] (dcQ, d)
            new["W_DQ"], new["W_UQ"] = down, _split_heads(up, nH)
        Dk, Uk = _svd_split(Wk, kv_rank)  # W_DK, W_UK
        new["W_DK"], new["W_UK"] = Dk, _split_heads(Uk, nH)
        if shared_kv:  # W_DKV = W_DK; W_UV = argmin |W_DKV W_UV - W_V| = W_DK^T W_V (orthonormal W_DK)
            new["W_UV"] = _split_heads(Dk.t() @ Wv, nH)
        else:
            Dv, Uv = _svd_split(Wv, kv_rank)
            new["W_DV"], new["W_UV"] = Dv, _split_heads(Uv, nH)
        if c.bias:  # biases ride on the up-projections (exact); down-projections get none
            zeros = lambda n: torch.zeros(n, dtype=torch.float64, device=Wq.device)
            new.update(b_UQ=w["b_Q"], b_UK=w["b_K"], b_UV=w["b_V"], b_DK=zeros(kv_rank))
            if q_rank is not None:
                new["b_DQ"] = zeros(q_rank)
            if not shared_kv:
                new["b_DV"] = zeros(kv_rank)
        attention.append(new)
        layers.append({})
    return with_attention(model, config, attention), layers


@torch.no_grad()
def mha_to_tucker(model: GPT, ranks: Sequence[int], ranks_post: Optional[Sequence[int]] = None,
                  shared_kv: bool = False, allow_rope_change: bool = False):
    """MHA (or GQA) -> Tucker by HOSVD of W and W~ (module docstring). Returns (model, per-layer info
    with the relative reconstruction errors of W and W~: of the float64 factors (W_rel_err, Wt_rel_err), and for a
    16-bit source also of the factors as the model stores them, rounded to its dtype (W_rel_err_stored,
    Wt_rel_err_stored))."""
    _check_source(model, "tucker", allow_rope_change)
    c = model.config
    config = target_config(c, "tucker", ranks=ranks, ranks_post=ranks_post, shared_kv=shared_kv)
    ranks, ranks_post = config.tucker_ranks, config.tucker_ranks_post
    attention, layers, sources = [], [], []
    for block in model.transformer.h:
        attn = block.attn
        fW, fWt = factored_tensors(attn)  # float64
        U3 = shared_mode3_basis(fW, fWt, ranks[2]) if shared_kv else None
        U1, U2, U3, core = hosvd(fW, ranks, U3)
        V1, V2, V3, core_post = hosvd(fWt, ranks_post, U3 if shared_kv else None)
        new = dict(core=core, U1=U1, U2=U2, U3=U3, core_post=core_post, U1_post=V1, U2_post=V2)
        if not shared_kv:
            new["U3_post"] = V3
        info = dict(W_rel_err=projection_error(fW, U1, U2, U3), Wt_rel_err=projection_error(fWt, V1, V2, V3))
        if c.bias:
            w = _weights64(attn)
            # value bias -> output bias (exact): sum_i b_V,i W_O,i; key bias: no effect on softmax;
            # query bias: dropped
            b_V = w["b_V"].repeat_interleave(attn.n_head // attn.n_kv_head, dim=0)  # (nH, dH): head i's
            new["b_O"] = torch.einsum("ik,ikd->d", b_V, w["W_O"]) + w["b_O"]
            info["query_bias_norm"] = float(w["b_Q"].norm())
        attention.append(new)
        layers.append(info)
        sources.append((fW, fWt))
    out = with_attention(model, config, attention)
    if next(model.parameters()).dtype in (torch.bfloat16, torch.float16):  # the stored factors' rounding: ~1e-3
        for info, (fW, fWt), block in zip(layers, sources, out.transformer.h):
            gW, gWt = factored_tensors(block.attn)  # float64 of the stored (rounded) factors
            info.update(W_rel_err_stored=gram_error(fW, gW), Wt_rel_err_stored=gram_error(fWt, gWt))
    return out, layers


@torch.no_grad()
def convert(model: GPT, to: str, *, ranks=None, ranks_post=None, n_kv_head=None, kv_rank=None, q_rank=None,
            shared_kv=False, allow_rope_change=False):
    """Dispatch to one conversion, then add the relative reconstruction errors of W and W~ per layer."""
    if to == "gqa":
        if n_kv_head is None:
            raise ValueError("--to=gqa needs --n_kv_head")
        if shared_kv:
            raise ValueError("--shared_kv is for --to=mla or --to=tucker (GQA's K and V heads are separate)")
        out, layers = mha_to_gqa(model, n_kv_head)
    elif to == "mla":
        if kv_rank is None:
            raise ValueError("--to=mla needs --kv_rank")
        out, layers = mha_to_mla(model, kv_rank, q_rank, shared_kv, allow_rope_change)
    elif to == "tucker":
        if ranks is None:
            raise ValueError("--to=tucker needs --ranks=r1,r2,r3")
        return mha_to_tucker(model, ranks, ranks_post, shared_kv, allow_rope_change)
    else:
        raise ValueError(f"--to={to!r} is unknown: allowed 'gqa', 'mla', 'tucker'")
    for info, a, b in zip(layers, model.transformer.h, out.transformer.h):  # same k = dH on both sides
        (fW, fWt), (gW, gWt) = (factored_tensors(x.attn) for x in (a, b))  # float64
        gW = Factored(gW.A(), gW.B())  # MLA: model coordinates, comparable with MHA's
        gWt = Factored(gWt.A(), gWt.B())
        info.update(W_rel_err=difference_error(fW, gW), Wt_rel_err=difference_error(fWt, gWt))
    return out, layers


# ----------------------------------------------------------------------------------------
# Sources: a train.py checkpoint, or Hugging Face GPT-2


def from_hf_gpt2(hf_model, vocab_size: Optional[int] = None) -> GPT:
    """Our GPT (attn='mha', bias=True, learned positions) with the weights of a transformers
    GPT2LMHeadModel. HF's Conv1D stores weights (in, out), nn.Linear (out, in): transpose them.

    vocab_size: None keeps HF's (50257 for GPT-2, exact logits). A larger value pads wte/lm_head
    with zero rows (fast matmuls), but then the padded tokens get logit 0, far above GPT-2's
    usual logits: fine to fine-tune from, not to sample from before fine-tuning.
    MLP activation: our model uses exact GELU; GPT-2 uses the tanh approximation ('gelu_new'),
    which differs by < 1e-3 per activation (nanoGPT makes the same substitution): a warning says so."""
    c = hf_model.config
    if c.n_embd % c.n_head:
        raise ValueError(f"n_embd={c.n_embd} must be a multiple of n_head={c.n_head}")
    if getattr(c, "n_inner", None) not in (None, 4 * c.n_embd):
        raise ValueError(f"n_inner={c.n_inner}: our MLP is 4 n_embd wide")
    if not getattr(c, "scale_attn_weights", True) or getattr(c, "scale_attn_by_inverse_layer_idx", False):
        raise ValueError("attention scaling other than 1/sqrt(head_dim) is not supported")
    if abs(getattr(c, "layer_norm_epsilon", 1e-5) - 1e-5) > 1e-12:
        raise ValueError(f"layer_norm_epsilon={c.layer_norm_epsilon}: our LayerNorm uses 1e-5")
    if c.activation_function != "gelu":
        warnings.warn(f"HF activation_function={c.activation_function!r}; our MLP uses exact GELU, so logits "
                      "differ slightly from the HF model's (as in nanoGPT)")
    V = vocab_size or c.vocab_size
    if V < c.vocab_size:
        raise ValueError(f"vocab_size={V} is smaller than the HF model's {c.vocab_size}")
    # GPT-2 ties its output head to the embedding; a model saved with tie_word_embeddings=False has its own
    tied = hf_model.lm_head.weight.data_ptr() == hf_model.transformer.wte.weight.data_ptr()
    config = GPTConfig(block_size=c.n_positions, vocab_size=V, n_layer=c.n_layer, n_head=c.n_head,
                       n_embd=c.n_embd, dropout=0.0, bias=True, attn="mha", pos_emb="learned", tie_embeddings=tied)
    sd = hf_model.state_dict()
    dtype = sd["transformer.wte.weight"].dtype
    model = GPT(config).to(dtype)
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    state = {}
    for k in model.state_dict():
        if k in ("transformer.wte.weight", "lm_head.weight"):
            w = sd["lm_head.weight" if k == "lm_head.weight" and not tied else "transformer.wte.weight"]  # (vocab, d)
            state[k] = torch.cat([w, w.new_zeros(V - w.size(0), w.size(1))])
        else:
            state[k] = sd[k].t() if k.endswith(conv1d) else sd[k]
    model.load_state_dict(state, strict=True)
    return model.eval()


# ----------------------------------------------------------------------------------------
# Evaluation and output


def val_loss(model: GPT, data_dir: str, batches: int, batch_size: int, device: str = "cpu",
             dtype: str = "float32", seed: int = 1337) -> float:
    """Mean loss on `batches` x `batch_size` random windows of val.bin (the same windows for every
    model: a fixed seed), with train.py's own evaluation."""
    dev = torch.device(device)
    make_current(dev)  # cuda:N current: the model's Triton kernels launch on the current device
    autocast = (torch.autocast(device_type=dev.type, dtype=getattr(torch, dtype)) if dtype != "float32"
                else contextlib.nullcontext())
    return split_loss(model.to(dev), os.path.join(data_dir, "val.bin"), model.config.block_size, batch_size,
                      batches, full=False, device=dev, autocast=autocast, seed=seed)


def write_checkpoint(model: GPT, out_dir: str, source_config: Optional[dict], info: dict,
                     weight_decay: float, betas: Tuple[float, float]) -> str:
    """out_dir/ckpt.pt in train.py's format, at iteration 0. train.py --init_from=resume loads the
    optimizer state, and its param groups' hyperparameters (weight decay, betas, fused) come from the
    checkpoint: hence a fresh AdamW built here with the fine-tuning run's values."""
    from checkpoint import make_checkpoint, save_checkpoint  # noqa: lazy
    from train_config import TRAIN_DEFAULTS  # noqa: lazy
    os.makedirs(out_dir, exist_ok=True)
    model = model.float()  # train.py's weights are float32
    optimizer = model.configure_optimizers(weight_decay, TRAIN_DEFAULTS["learning_rate"], betas, "cuda")  # fused, as on GPU
    config = dict(source_config or {})
    config.update(model.config.to_dict(), out_dir=out_dir, init_from="resume")  # how train.py continues it
    seed = config.get("seed", TRAIN_DEFAULTS["seed"])
    state = make_checkpoint(model, optimizer, config, iter_num=0, best_val_loss=float("inf"), best_iter=-1,
                            sampler_state=torch.Generator().manual_seed(seed).get_state(), convert=info)
    path = os.path.join(out_dir, "ckpt.pt")
    save_checkpoint(path, state)
    return path


def _ints(text: Optional[str], n: int, name: str):
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != n:
        raise ValueError(f"--{name}={text!r}: give {n} comma-separated integers")
    return values


# the options of each target; any other target's given here would be ignored: refused instead
TARGET_OPTIONS = {"gqa": ("n_kv_head",), "mla": ("kv_rank", "q_rank", "shared_kv", "allow_rope_change"),
                  "tucker": ("ranks", "ranks_post", "shared_kv", "allow_rope_change")}  # GQA keeps head-dim RoPE


def check_args(args) -> None:
    """Every option checked before the conversion runs: ValueError naming it."""
    for name in sorted({n for ns in TARGET_OPTIONS.values() for n in ns} - set(TARGET_OPTIONS[args.to])):
        if getattr(args, name) not in (None, False):
            raise ValueError(f"--{name} is an option of --to {' / '.join(t for t, ns in TARGET_OPTIONS.items() if name in ns)},"
                             f" not of --to {args.to}: remove it")
    if args.vocab_size is not None and not args.hf:
        raise ValueError("--vocab_size pads a Hugging Face model's vocabulary: it needs --hf (a checkpoint keeps its own)")
    for name in ("eval_batches", "batch_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name}={getattr(args, name)} is out of range: allowed >= 1")
    if args.data_dir is not None and not os.path.isfile(os.path.join(args.data_dir, "val.bin")):
        raise ValueError(f"--data_dir {args.data_dir} has no val.bin (python -m data.<dataset>.prepare writes it)")
    check_device(args.device)
    out = os.path.abspath(args.out_dir)
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out_dir {args.out_dir} is a file, not a folder")
    if args.in_dir and out == os.path.abspath(args.in_dir if os.path.isdir(args.in_dir) else os.path.dirname(args.in_dir)):
        raise ValueError("--out_dir is the source's own folder: the converted model would replace it; give another")
    held = [name for name in ("ckpt.pt", "summary.json", "log.jsonl") if os.path.isfile(os.path.join(out, name))]
    if held:
        raise ValueError(f"--out_dir {args.out_dir} holds a run ({', '.join(held)}): the converted model would replace "
                         "it; give another folder")


def main(argv: Optional[List[str]] = None) -> dict:
    # what it does and the usage example after it (the first paragraph alone ended mid-sentence or at a colon)
    ap = argparse.ArgumentParser(description="\n\n".join(__doc__.strip().split("\n\n")[:2]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--in_dir", help="folder with ckpt.pt of an MHA model (or a .pt path)")
    src.add_argument("--hf", help="Hugging Face GPT-2 name or path (needs transformers), e.g. gpt2")
    ap.add_argument("--to", required=True, choices=("gqa", "mla", "tucker"))
    ap.add_argument("--out_dir", required=True)
    ap.add_argument("--ranks", help="Tucker pre-softmax ranks r1,r2,r3")
    ap.add_argument("--ranks_post", help="Tucker post-softmax ranks (default: --ranks)")
    ap.add_argument("--n_kv_head", type=int, help="GQA key/value heads")
    ap.add_argument("--kv_rank", type=int, help="MLA key/value latent rank dcK")
    ap.add_argument("--q_rank", type=int, help="MLA query latent rank dcQ (default: full query)")
    ap.add_argument("--shared_kv", action="store_true", help="MLA W_DKV / Tucker U~3 = U3")
    ap.add_argument("--allow_rope_change", action="store_true", help="convert a RoPE MHA to latent RoPE (not exact)")
    ap.add_argument("--vocab_size", type=int, help="--hf: pad the vocabulary to this size (default: keep 50257)")
    ap.add_argument("--data_dir", help="folder with val.bin: report val loss before and after")
    ap.add_argument("--eval_batches", type=int, default=20)
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--device", default="cpu", help="device for the val loss (conversion runs on CPU in float64)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"), help="val loss autocast")
    ap.add_argument("--weight_decay", type=float, default=0.1, help="AdamW of the fresh optimizer state (train.py default)")
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    args = ap.parse_args(argv)

    try:
        check_args(args)
        ranks, ranks_post = _ints(args.ranks, 3, "ranks"), _ints(args.ranks_post, 3, "ranks_post")
        if args.hf:
            try:
                from transformers import GPT2LMHeadModel  # noqa: lazy, optional
            except ImportError:
                raise ValueError("--hf needs the transformers package (pip install transformers)")
            model, source_config, source = from_hf_gpt2(GPT2LMHeadModel.from_pretrained(args.hf), args.vocab_size), {}, f"hf:{args.hf}"
        else:
            model, checkpoint = load_checkpoint(args.in_dir)
            source_config, source = checkpoint.get("config", {}), args.in_dir
        if args.data_dir:  # before the conversion, not after it: its length and ids against this model
            check_token_file(os.path.join(args.data_dir, "val.bin"), model.config.vocab_size, model.config.block_size)
        out, layers = convert(model, args.to, ranks=ranks, ranks_post=ranks_post, n_kv_head=args.n_kv_head,
                              kv_rank=args.kv_rank, q_rank=args.q_rank, shared_kv=args.shared_kv,
                              allow_rope_change=args.allow_rope_change)
    except (ValueError, OSError) as e:  # OSError: e.g. --hf offline without a local copy
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)

    print(f"{source} ({model.config.attn}) -> {args.to}: attention params {model.attn_params():,} -> {out.attn_params():,}, "
          f"KV values/token/layer {model.kv_values_per_token_per_layer()} -> {out.kv_values_per_token_per_layer()}")
    for i, info in enumerate(layers):
        extra = f"  (query bias |b_Q| = {info['query_bias_norm']:.3g} dropped)" if info.get("query_bias_norm") else ""
        if "W_rel_err_stored" in info:  # a 16-bit source: the factors as saved, rounded to its dtype
            extra = (f"  (as stored in {str(next(out.parameters()).dtype).replace('torch.', '')}: W "
                     f"{info['W_rel_err_stored']:.3e}  W~ {info['Wt_rel_err_stored']:.3e})") + extra
        print(f"layer {i:2d}: rel. error W {info['W_rel_err']:.3e}  W~ {info['Wt_rel_err']:.3e}{extra}")
    if any(info.get("query_bias_norm") for info in layers):
        print("note: Tucker has no query bias: dropping it makes the conversion inexact even at full ranks")
    if args.allow_rope_change and model.config.pos_emb == "rope":
        print("note: the source's RoPE on every head became latent RoPE: not exact at any rank (the errors above are "
              "of W and W~, which do not see positions; the val loss below does)")
    info = dict(source=source, to=args.to, model_config=out.config.to_dict(),
                attn_params=[model.attn_params(), out.attn_params()],
                kv_values_per_token_per_layer=[model.kv_values_per_token_per_layer(), out.kv_values_per_token_per_layer()],
                layers=[dict(layer=i, **info) for i, info in enumerate(layers)],
                val_loss_before=None, val_loss_after=None, eval_batches=None, batch_size=None)
    if args.data_dir:
        before = val_loss(model, args.data_dir, args.eval_batches, args.batch_size, args.device, args.dtype)
        after = val_loss(out, args.data_dir, args.eval_batches, args.batch_size, args.device, args.dtype)
        info.update(val_loss_before=before, val_loss_after=after, eval_batches=args.eval_batches,
                    batch_size=args.batch_size)
        print(f"val loss ({args.eval_batches} batches of {args.batch_size}): {before:.4f} before, {after:.4f} after")
    out = out.cpu()
    path = write_checkpoint(out, args.out_dir, source_config, info, args.weight_decay, (args.beta1, args.beta2))
    write_json(os.path.join(args.out_dir, "convert.json"), info)
    print(f"wrote {path} and {os.path.join(args.out_dir, 'convert.json')}")
    return info


if __name__ == "__main__":
    main()

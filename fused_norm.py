"""
Residual add + norm in one kernel, for the decode step.

A decode step at batch 1 is ~150 small kernels, and its time is their count more than their bytes
(results/bench/LOG.md). Every layer adds a sublayer's output to the residual stream and normalizes
the sum for the next sublayer, two launches each time, four per layer:

    x = x + delta      (B, d)   the residual stream, in the activations' dtype
    h = norm(x)        (B, d)   LayerNorm (weight, optional bias) or RMSNorm (weight), fp32 statistics

`add_norm` does both in one Triton program per row, the sum rounded to the stream's dtype before its statistics are
taken (as the two-op form computes them). model.DecodeIO uses it where decode_linear's kernel does not serve (batches
over decode_linear.MAX_ROWS, 3-4 rows of a K over decode_linear.WIDE_ROWS_MAX_K and a weight over
WIDE_ROWS_MAX_WEIGHT, an LM head at 2 or more rows, decode_linear.serves_rows: cuBLAS matmuls; the sublayer's output
is then left as a pending add to the stream and added here, with the next norm), for the position embedding's add at
any batch, and after a sublayer that returns a pending add itself (MLA's unmerged decode path). Same math as the two
ops, not the same bits: the kernel's fp32 reduction order differs from ATen's, so equality is tested to the dtype's
rounding.

Used where it is exact and cheap to choose: CUDA, Triton importable, x / delta / the norm's parameters all
in one dtype (fp16, bf16 or fp32), no autocast, rows of at most MAX_DIM, and not while torch.compile
traces (inductor fuses the two ops itself). Everything else takes the two torch ops (`backend='torch'`).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from decode_attention import _interpret, _triton_available, kernel_unavailable  # the shared checks

MAX_DIM = 16384
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


if _triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _add_norm_kernel(X, Delta, W, Bias, S, Y, d, eps, s_x, s_dl, s_s, s_y,
                         BLOCK: tl.constexpr, RMS: tl.constexpr, HAS_BIAS: tl.constexpr):
        # one row: s = x + delta (rounded to S's dtype), y = norm(s) * w (+ b)
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        mask = offs < d
        x = tl.load(X + row * s_x + offs, mask=mask, other=0.0).to(tl.float32)
        dl = tl.load(Delta + row * s_dl + offs, mask=mask, other=0.0).to(tl.float32)
        s = (x + dl).to(S.dtype.element_ty)
        tl.store(S + row * s_s + offs, s, mask=mask)
        s = s.to(tl.float32)
        if RMS:
            y = s * tl.rsqrt(tl.sum(s * s, axis=0) / d + eps)
        else:
            centered = tl.where(mask, s - tl.sum(s, axis=0) / d, 0.0)
            y = centered * tl.rsqrt(tl.sum(centered * centered, axis=0) / d + eps)
        y = y * tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            y += tl.load(Bias + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * s_y + offs, y.to(Y.dtype.element_ty), mask=mask)


def _norm_params(norm) -> Tuple[str, torch.Tensor, Optional[torch.Tensor], float]:
    """(kind, weight, bias, eps) of a model.LayerNorm ('layernorm', bias or None) or model.RMSNorm ('rmsnorm')."""
    return norm.kind, norm.weight, getattr(norm, "bias", None), float(norm.eps)


def _unsupported(x: torch.Tensor, delta: torch.Tensor, norm) -> Optional[str]:
    """Why the kernel cannot serve these (None when it can)."""
    if getattr(norm, "kind", None) not in ("layernorm", "rmsnorm"):
        return f"the kernel knows model.LayerNorm and model.RMSNorm, not {type(norm).__name__}"
    _, weight, bias, _ = _norm_params(norm)
    params = [weight] + ([bias] if bias is not None else [])
    if x.shape != delta.shape or x.size(-1) != weight.numel():
        return f"shapes x {tuple(x.shape)}, delta {tuple(delta.shape)}, weight {tuple(weight.shape)}"
    if x.dtype not in DTYPES or any(t.dtype != x.dtype for t in [delta] + params):
        return "x, delta and the norm's parameters must share one of fp16/bf16/fp32"
    if x.size(-1) > MAX_DIM:
        return f"rows of {x.size(-1)} > {MAX_DIM}"
    return kernel_unavailable(x, "the two ops")


def add_norm_backend(x: torch.Tensor, delta: torch.Tensor, norm) -> str:
    """What backend='auto' runs: 'triton' on CUDA when the kernel serves these tensors and torch.compile is
    not tracing, else 'torch'. The one place that chooses."""
    if x.device.type != "cuda" or torch.compiler.is_compiling():
        return "torch"
    return "triton" if _unsupported(x, delta, norm) is None else "torch"


def add_norm(x: torch.Tensor, delta: torch.Tensor, norm, backend: str = "auto") -> Tuple[torch.Tensor, torch.Tensor]:
    """(x + delta, norm(x + delta)) for x, delta (..., d) and norm a model.LayerNorm or model.RMSNorm.
    backend: 'auto' (add_norm_backend), 'triton' (an error naming the reason where it cannot run), 'torch'."""
    if backend == "auto":
        backend = add_norm_backend(x, delta, norm)
    elif backend == "triton":
        why = _unsupported(x, delta, norm)
        if why is not None:
            raise ValueError(f"add_norm backend='triton' cannot run: {why}")
    elif backend != "torch":
        raise ValueError(f"backend must be 'auto', 'triton' or 'torch', got {backend!r}")
    if backend == "torch":
        s = x + delta
        return s, norm(s)
    kind, weight, bias, eps = _norm_params(norm)
    d = x.size(-1)
    x2, delta2 = x.reshape(-1, d), delta.reshape(-1, d)  # (rows, d) views where the layout allows
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if delta2.stride(-1) != 1:
        delta2 = delta2.contiguous()
    s, y = torch.empty_like(x2), torch.empty_like(x2)
    _add_norm_kernel[(x2.size(0),)](
        x2, delta2, weight, bias if bias is not None else weight, s, y, d, eps,
        x2.stride(0), delta2.stride(0), s.stride(0), y.stride(0),
        BLOCK=triton.next_power_of_2(d), RMS=kind == "rmsnorm", HAS_BIAS=bias is not None,
        num_warps=4 if d <= 4096 else 8)
    return s.view(x.shape), y.view(x.shape)

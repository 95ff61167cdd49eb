"""
Exact GELU for the training step's MLP, x Phi(x), in one Triton kernel forward and one backward on CUDA.

Inductor writes F.gelu as 0.5 x (1 + erf(x / sqrt 2)), and libdevice's erf is the cost: on an H200 its kernels
take 60 us (forward) and 80 us (backward) a layer on GPT-2's 12,288 x 3,072 bf16 pre-activations, where a copy
of the same bytes takes 39 and 55 us, and a formula with one exponential instead of the erf runs at the copy rate
(results/bench/session14/bench_gelu_call1.md). Here the normal CDF is written through the scaled complementary error
function, whose exponential factor the backward's density shares:

    Phi(x) = 1 - h  (x >= 0),   h  (x < 0),     h = 1/2 erfcx(|x| / sqrt 2) exp(-x^2 / 2)
    GELU(x) = x Phi(x)          GELU'(x) = Phi(x) + x phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)

with erfcx(t) = exp(t^2) erfc(t) ~ u P(u), u = 1 / (1 + t/2), P of degree 8 (ERFCX_COEFFS, fit_erfcx(): relative
error 4.3e-8 on t in [0, 10], below float32's 6e-8 spacing; t is clamped there: for x < -14.1, exp(-x^2 / 2) is
below float32's normal range and Phi(x) below 1e-44). One reciprocal, eight multiply-adds of the polynomial, a few
multiplies and one exp2 a value. The negative
tail is computed as the small number it is, not as 1 + erf(x) (which cancels): every bf16 input whose GELU is a
normal number gets the correctly rounded bf16 GELU (tests/test_fused_gelu.py), where inductor's float32 erf form
misses by up to 165 bf16 spacings in that tail (bench_gelu's err column).

`gelu` is the one dispatch point: the Triton kernels on CUDA (and on the CPU under TRITON_INTERPRET=1, for tests),
registered as torch.library triton_ops so that torch.compile keeps each as one call; F.gelu everywhere else
(and with backend='torch'). model.MLP calls it where GPTConfig.gelu is 'auto' (the default).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from decode_attention import _interpret, _triton_available, device_problem, triton_ops_wanted

# Tuning knobs, read at call time (under torch.compile: when the step is traced).
BLOCK = 2048  # elements per program (H200, results/bench/session14/bench_gelu.md: 2,048 with 4 warps the fastest
NUM_WARPS = 4  # forward and backward at both GPT-2 shapes, 4,096 or 8 warps 1-8% slower)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
BACKENDS = ("auto", "triton", "torch")
FWD_OP, BWD_OP = "tucker_attention::gelu_fwd", "tucker_attention::gelu_bwd"
ERFCX_U_SCALE = 0.5  # u = 1 / (1 + ERFCX_U_SCALE t)
ERFCX_T_MAX = 10.0  # the fit's range (t is clamped to it)
# erfcx(t) ~ u * P(u), P's coefficients from the highest power down: fit_erfcx()'s result, stored
ERFCX_COEFFS = (-0.05907525587343264, 0.2846016792286031, -0.4872469585297559, 0.2781116412734165,
                -0.02664998473717463, 0.20269457136896138, 0.2431024351196083, 0.2823754130185321,
                0.2820864157867591)
_HAVE_TRITON = _triton_available()  # once, at import: not a cached call inside a traced step
_FWD = _BWD = None  # the kernels' torch.library ops, once register_ops has made them


def fit_erfcx(degree: int = 8, u_scale: float = ERFCX_U_SCALE, t_max: float = ERFCX_T_MAX, points: int = 200_001,
              rounds: int = 40):
    """ERFCX_COEFFS as they were made: erfcx(t) / u fit by a polynomial in u = 1 / (1 + u_scale t) on [0, t_max],
    least squares on the relative error, reweighted `rounds` times toward the largest errors (Lawson's iteration,
    a near-minimax fit). Returns (coefficients from the highest power down, max relative error), float64."""
    t = torch.linspace(0.0, t_max, points, dtype=torch.float64)
    u = 1.0 / (1.0 + u_scale * t)
    target = torch.special.erfcx(t) / u
    powers = torch.vander(u, degree + 1)  # (points, degree + 1): u^degree ... u^0
    w = torch.ones_like(t)
    for _ in range(rounds):
        coeffs = torch.linalg.lstsq(powers * (w / target)[:, None], w[:, None]).solution[:, 0]
        w = w * ((powers @ coeffs) / target - 1).abs().sqrt()
        w = w / w.mean()
    return coeffs, ((powers @ coeffs) / target - 1).abs().max().item()


if _HAVE_TRITON:
    import triton
    import triton.language as tl

    _C0, _C1, _C2 = tl.constexpr(ERFCX_COEFFS[0]), tl.constexpr(ERFCX_COEFFS[1]), tl.constexpr(ERFCX_COEFFS[2])
    _C3, _C4, _C5 = tl.constexpr(ERFCX_COEFFS[3]), tl.constexpr(ERFCX_COEFFS[4]), tl.constexpr(ERFCX_COEFFS[5])
    _C6, _C7, _C8 = tl.constexpr(ERFCX_COEFFS[6]), tl.constexpr(ERFCX_COEFFS[7]), tl.constexpr(ERFCX_COEFFS[8])
    _U_SCALE, _T_MAX = tl.constexpr(ERFCX_U_SCALE), tl.constexpr(ERFCX_T_MAX)
    _INV_SQRT2 = tl.constexpr(0.7071067811865476)  # 1 / sqrt 2
    _NEG_HALF_LOG2E = tl.constexpr(-0.7213475204444817)  # -log2(e) / 2: exp(-x^2 / 2) = exp2(x^2 * this)
    _INV_SQRT_2PI = tl.constexpr(0.3989422804014327)  # 1 / sqrt(2 pi): the density's factor

    @triton.jit
    def _normal_cdf(x):
        """float32 x -> (Phi(x), exp(-x^2 / 2)): the normal CDF and the exponential its density shares."""
        t = tl.minimum(tl.abs(x) * _INV_SQRT2, _T_MAX)
        u = 1.0 / (1.0 + _U_SCALE * t)
        p = _C0 * u + _C1
        p = p * u + _C2
        p = p * u + _C3
        p = p * u + _C4
        p = p * u + _C5
        p = p * u + _C6
        p = p * u + _C7
        p = p * u + _C8  # erfcx(t) / u
        e = tl.exp2(x * x * _NEG_HALF_LOG2E)  # exp(-x^2 / 2)
        h = 0.5 * e * (u * p)  # 1/2 erfc(|x| / sqrt 2) = Phi(-|x|)
        return tl.where(x >= 0, 1.0 - h, h), e

    @triton.jit
    def _gelu_fwd_kernel(X, Y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        cdf, _ = _normal_cdf(x)
        tl.store(Y + offs, (x * cdf).to(Y.dtype.element_ty), mask=mask)

    @triton.jit
    def _gelu_bwd_kernel(G, X, DX, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
        cdf, e = _normal_cdf(x)  # GELU'(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
        tl.store(DX + offs, (g * (cdf + x * (_INV_SQRT_2PI * e))).to(DX.dtype.element_ty), mask=mask)

    def _gelu_fwd_impl(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:  # no program to launch
            return y
        torch.library.wrap_triton(_gelu_fwd_kernel)[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK,
                                                                               num_warps=NUM_WARPS)
        return y

    def _gelu_bwd_impl(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        dx = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return dx
        torch.library.wrap_triton(_gelu_bwd_kernel)[(triton.cdiv(n, BLOCK),)](g, x, dx, n, BLOCK=BLOCK,
                                                                               num_warps=NUM_WARPS)
        return dx


def register_ops() -> bool:
    """Register the two kernels as torch.library ops (once) where a device can run them: at import, and by the
    model's MLP as it is built, never inside a traced step (Dynamo would break the graph around a registration, as
    for fused_loss.register_ops). Returns whether the ops are there."""
    global _FWD, _BWD
    if _FWD is None and _HAVE_TRITON and triton_ops_wanted(_interpret()):
        _FWD = torch.library.triton_op(FWD_OP, _gelu_fwd_impl, mutates_args=())
        _BWD = torch.library.triton_op(BWD_OP, _gelu_bwd_impl, mutates_args=())
    return _FWD is not None


register_ops()


class _TritonGELU(torch.autograd.Function):
    """GELU through the two kernels; saves its input (as inductor's GELU saves the pre-activation)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _FWD(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _BWD(grad.contiguous(), x)


def unsupported(x: torch.Tensor) -> Optional[str]:
    """Why the Triton kernels cannot take x now (None when they can)."""
    why = device_problem(x.device, _interpret())
    if why:
        return why
    if not _HAVE_TRITON:
        return "triton is not installed"
    if x.dtype not in DTYPES:
        return f"dtype {x.dtype} (one of fp16/bf16/fp32)"
    if not x.is_contiguous():
        return "x must be contiguous"
    return None


def gelu(x: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """F.gelu(x) (exact, erf), differentiable. backend 'auto': the Triton kernels where they can run, else F.gelu;
    'triton': the kernels or a ValueError; 'torch': F.gelu."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {BACKENDS}")
    why = unsupported(x) if backend != "torch" else "backend='torch'"
    if why is not None:
        if backend == "triton":
            raise ValueError(f"fused_gelu.gelu: the Triton kernels cannot run: {why}")
        return F.gelu(x)
    return _TritonGELU.apply(x)

"""
The decode step's matmuls with what surrounds them fused: norm -> matmul -> bias, activation, residual add.

A decode step at batch 1 reads every weight once, yet its time is the count of its kernels more than their
bytes: ~120 launches of a few microseconds for GPT-2 124M (results/bench/LOG.md). Each sublayer of a
block is a norm, one or two matmuls and a residual add,

    y = x + act(norm(x) @ W1^T + b1) @ W2^T + b2        (B, d), B = the decode batch, a few rows

and the matmuls' neighbours need no more than the rows the matmul already holds: the norm's statistics are
over one row of x (d values, re-read by every program), the bias, GELU or SwiGLU's gate act on the output
tile, the residual is the same tile of x. `decode_linear` computes

    out = [residual +] act(norm(a) @ weight^T [+ bias] [, norm(a) @ weight2^T [+ bias2]])

in one Triton kernel for at most MAX_ROWS rows: per block of output columns and of MAX_BLOCK_M rows, the input
rows normalized as they are read, each weight row streamed once a row block (3-4 rows: once for each of the
two), the epilogue in fp32 with the torch ops' rounding points (each op's result rounded to the
activations' dtype, as the unfused ops store it). Where a whole row of K fits one
tile (GPT-2: K = 768 and 3072; at batch 1 LLaMA-1B's 8192, one column a program), every load of a program is issued
at once and the norm's statistics come from registers: a small kernel's time is its chain of dependent memory round
trips. A block is then 4 kernels plus attention's (norm + QKV, the output projection + residual, norm + fc + GELU,
proj + residual), not 8-10.
On Hopper each kernel is launched with programmatic dependent launch (PDL): it may start while the kernel
before it finishes; where a whole K row fits one tile it issues its weight loads first and waits
(griddepcontrol.wait) before it reads its input (the loop over K chunks waits first). Its stores come after
the wait, so a buffer the previous kernel still reads is never overwritten early. The contract: the weights,
biases and norm parameters must not be written by the kernel launched just before (a decode step's weights
are parameters, or inference forms whose build ends with a fence kernel, model.InferenceForm). More rows are a
GEMM: cuBLAS's tensor-core matmuls serve them (model.DecodeIO then fuses each residual add with the norm after it
instead, fused_norm.add_norm).

Same math as the torch ops, not the same bits (fp32 sums in another order): tested to the dtype's rounding.
Used where it is exact and cheap to choose: CUDA, Triton importable, at most 2 rows (MAX_ROWS = 4 where K is at most
WIDE_ROWS_MAX_K or the weight at most WIDE_ROWS_MAX_WEIGHT elements: larger ones at 3-4 rows run faster on cuBLAS; 1
row for weights of more than MULTI_ROW_MAX_WEIGHT elements, the LM heads, which cuBLAS reads faster from 2 rows),
every tensor in one dtype (fp16, bf16, fp32), no autocast, and not while torch.compile traces this module's code
(the model calls it from outside the traced graph, torch.compiler.disable, so a compiled decode step keeps the
kernel).
Elsewhere the torch ops run (`backend='torch'`), exactly the unfused model's.

weight is F.linear's (N, K) with any strides: a matrix stored (K, N) for `x @ W` is passed as W.t() (and is
best stored as the transpose of a contiguous (N, K), so that K is the contiguous dimension of the tiles).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from decode_attention import (DTYPES, _cdiv, _interpret, _pdl_launch, _pow2, _pow2_floor,  # shared: one of each
                              _sm_count, _triton_available, kernel_unavailable, pdl_capable)
from fused_norm import _norm_params as _norm_module_params

ENABLED = True  # False: every call takes the torch ops (bench_decode --knob decode_linear.ENABLED=False)
ACTS = (None, "gelu", "swiglu")
MAX_ROWS = 4  # the kernel serves at most this many rows (batch 1 decoding is its case; more rows: cuBLAS) ...
WIDE_ROWS_MAX_K = 1024  # ... and more than 2 only where K (to a power of two) is at most this, or where the weight
#                         is small (WIDE_ROWS_MAX_WEIGHT). Wider, larger weights at 3-4 rows run slower than cuBLAS
#                         (H200, results/bench/LOG.md, session 53: LLaMA-1B's batch-3 and batch-4 steps 40-44%
#                         faster on cuBLAS)
WIDE_ROWS_MAX_WEIGHT = 3 << 20  # ... the small weights of any K served at 3-4 rows: at most this many elements (N x
#                                 K). H200, session 54 call 9, against cuBLAS there (3-4 rows in pairs): GPT-2's MLP
#                                 down-projection (2.4M) 8-21% off the steps at 3-4 sequences, a factored Tucker's
#                                 W_down and G_o (LLaMA-1B [32,128,128]: 0.8M, 0.5M) 9-10%; LLaMA-1B GQA-8's output
#                                 projection (4.2M) here made its step 3% slower
MULTI_ROW_MAX_WEIGHT = 1 << 25  # ... and more than 1 row only where the weight has at most this many elements (N x
#                                 K; SwiGLU's weight2 not counted): larger ones, here the LM heads (GPT-2's 38.6M,
#                                 LLaMA-1B's 263M), go to cuBLAS from 2 rows (H200,
#                                 session 54 call 7: GPT-2's head at 2 rows 34.1 us here against 25.6 on cuBLAS,
#                                 LLaMA-1B's 193 against 133; the steps at 2-4 sequences 3.8-6.7% faster). LLaMA-1B's
#                                 MLP matrices (16.8M) stay here: on cuBLAS its batch-2 steps took 13-19% longer
MAX_BLOCK_M = 2  # rows a program takes at most: 3-4 rows are two blocks of 2 (H200, session 54 calls 6-7: a K of
#                  128 at 3-4 rows 5.0-6.6 us in one block of 4, 2.2-3.5 in two of 2 (G_q, U~2); the steps at 3-4
#                  sequences 1.7-2.2% faster, factored Tucker's 8.6% (LLaMA-1B [32,128,128]) and 31% (GPT-2
#                  [8,128,128]))
TILE = 8192  # fp32 elements of one (rows x columns x K chunk) broadcast product (registers per program)
PROGRAMS_PER_SM = 2  # the column block is chosen for about this many programs per SM ...
MIN_BLOCK_N = 1  # ... within [MIN_BLOCK_N, MAX_BLOCK_N] columns, and small enough that a whole row of K fits
#                  the tile (one chunk: every load at once) where it can. 1, not 2: a K row that fits only alone still
#                  loads in one chunk (H200, results/bench/LOG.md, session 52: LLaMA-1B's 8192-wide rows at batch
#                  1, Tucker [32,64,64]'s step -2.7% (call 3); its 2048-wide rows at batch 4 -14% to -18%, GPT-2's
#                  3072-wide rows at batch 2 -2% to -6% (call 7); MLA [128] at batch 1 +0.8% (call 4))
MAX_BLOCK_N = 64
LOOP_BLOCK_N = 2  # columns a program where no K row fits the tile (a loop over K chunks): 2, not 1, whose twice as
#                  long chunks ran slower (call 6: LLaMA-1B at batch 2 +3-5%, GPT-2 at batch 4 +6%)
NUM_WARPS = 4
PRODUCT_2D = True  # one chunk (K <= BLOCK_K): the product a row at a time in the weight tile's own layout (_matvec;
#                   False: one 3D product, for which Triton moves the tile through shared memory; session 20: MHA's
#                   default batch-1 step at 4k 0.2729 -> 0.2519 ms, Tucker's 0.2601 -> 0.2323)
PDL = True  # programmatic dependent launch (Hopper on): a kernel starts while the one before it finishes, loads
#             its weights, and waits (griddepcontrol.wait) only before reading the previous kernel's output


if _triton_available():
    import triton
    import triton.language as tl
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    @triton.jit
    def _row_stats(A, rm64, m_ok, K, eps, s_am, NORM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
        # (mean, rstd) of each row over all K columns, fp32; LayerNorm in two passes (mean, then the centered
        # squares), RMSNorm's mean 0. The rows are re-read from L2 by every program
        mean = tl.zeros([BLOCK_M], tl.float32)
        if NORM == 1:
            total = tl.zeros([BLOCK_M], tl.float32)
            for k0 in range(0, K, BLOCK_K):
                rk = k0 + tl.arange(0, BLOCK_K)
                a = tl.load(A + rm64[:, None] * s_am + rk[None, :], mask=m_ok[:, None] & (rk < K)[None, :],
                            other=0.0).to(tl.float32)
                total += tl.sum(a, axis=1)
            mean = total / K
        sq = tl.zeros([BLOCK_M], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            rk = k0 + tl.arange(0, BLOCK_K)
            ok = m_ok[:, None] & (rk < K)[None, :]
            a = tl.load(A + rm64[:, None] * s_am + rk[None, :], mask=ok, other=0.0).to(tl.float32)
            c = tl.where(ok, a - mean[:, None], 0.0)
            sq += tl.sum(c * c, axis=1)
        return mean, tl.rsqrt(sq / K + eps)

    @triton.jit
    def _scale_shift(a, mean, rstd, nw, nb, k_ok, NORM: tl.constexpr, HAS_NB: tl.constexpr):
        # the norm's output of the (rows, K chunk) tile a (fp32), zero outside K, before its rounding, from its
        # statistics and its weight and bias as fp32 vectors (nb unused without HAS_NB)
        if NORM == 1:
            a = a - mean[:, None]
        a = a * rstd[:, None] * nw[None, :]
        if HAS_NB:
            a += nb[None, :]
        return tl.where(k_ok[None, :], a, 0.0)

    @triton.jit
    def _gelu_erf(y):
        # F.gelu (exact, the erf form) of fp32 y
        return 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))

    @triton.jit
    def _row_of(a, i):
        # row i (a static index) of the register tile a (rows, n), as (n,)
        return tl.sum(tl.where(tl.arange(0, a.shape[0])[:, None] == i, a, 0.0), axis=0)

    @triton.jit
    def _with_row(y, i, row):
        # y (rows, n) with its row i (a static index) replaced by row (n,)
        return tl.where(tl.arange(0, y.shape[0])[:, None] == i, row[None, :], y)

    @triton.jit
    def _matvec(a, w, TWO_D: tl.constexpr):
        """a (rows, K) fp32 times w (BN, K)^T: (rows, BN) fp32. TWO_D: a row at a time, each product in
        w's own layout (as loaded: 8 columns a thread), its row of a brought to that layout (K elements); else one 3D
        product, for which Triton moves w through shared memory into a layout of one column a thread."""
        wf = w.to(tl.float32)
        if TWO_D:
            y = tl.zeros([a.shape[0], w.shape[0]], tl.float32)
            for i in tl.static_range(a.shape[0]):
                y = _with_row(y, i, tl.sum(_row_of(a, i)[None, :] * wf, axis=1))
        else:
            y = tl.sum(a[:, None, :] * wf[None, :, :], axis=2)
        return y

    @triton.jit
    def _normalize(a, mean, rstd, NW, NB, rk, k_ok, NORM: tl.constexpr, HAS_NB: tl.constexpr):
        # _scale_shift with the weight and bias loaded from NW, NB
        nw = tl.load(NW + rk, mask=k_ok, other=0.0).to(tl.float32)
        nb = nw
        if HAS_NB:
            nb = tl.load(NB + rk, mask=k_ok, other=0.0).to(tl.float32)
        return _scale_shift(a, mean, rstd, nw, nb, k_ok, NORM, HAS_NB)

    @triton.jit
    def _decode_linear_kernel(A, NW, NB, W, Bias, W2, Bias2, R, Y, M, N, K, eps,
                              s_am, s_wn, s_wk, s_w2n, s_w2k, s_rm, s_ym,
                              NORM: tl.constexpr, HAS_NB: tl.constexpr, HAS_BIAS: tl.constexpr,
                              HAS_BIAS2: tl.constexpr, ACT: tl.constexpr, HAS_RES: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                              ONE_CHUNK: tl.constexpr, PDL: tl.constexpr, TWO_D: tl.constexpr):
        # one (BLOCK_M rows, BLOCK_N columns) tile of out: in one chunk a row at a time (_matvec, TWO_D), over K
        # chunks as broadcast products (rows, columns, K chunk) summed over K: each weight row's chunk is one
        # contiguous read. NORM 0 none, 1 LayerNorm, 2 RMSNorm;
        # ACT 0 none, 1 GELU (erf), 2 SwiGLU (silu(a W^T) * (a W2^T)). ONE_CHUNK (K <= BLOCK_K): every load
        # is issued at once and the statistics come from the tile in registers (a few microseconds of
        # dependent memory round trips is what a small kernel's time is made of)
        dt = Y.dtype.element_ty
        rm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        m_ok, n_ok = rm < M, rn < N
        rm64, rn64 = rm.to(tl.int64), rn.to(tl.int64)
        if ONE_CHUNK:
            rk = tl.arange(0, BLOCK_K).to(tl.int64)  # int64 offsets: a (K, N) weight passed transposed strides N
            k_ok = rk < K
            w_ok = n_ok[:, None] & k_ok[None, :]
            w = tl.load(W + rn64[:, None] * s_wn + rk[None, :] * s_wk, mask=w_ok, other=0.0)  # (BLOCK_N, BLOCK_K)
            if ACT == 2:
                w2 = tl.load(W2 + rn64[:, None] * s_w2n + rk[None, :] * s_w2k, mask=w_ok, other=0.0)
            if PDL:  # the weights are in flight; the input is the previous kernel's output: wait for it here
                gdc_wait()
                gdc_launch_dependents()
            a = tl.load(A + rm64[:, None] * s_am + rk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            if NORM != 0:
                af = a.to(tl.float32)
                if NORM == 2:
                    mean = tl.zeros([BLOCK_M], tl.float32)
                    rstd = tl.rsqrt(tl.sum(af * af, axis=1) / K + eps)
                else:
                    mean = tl.sum(af, axis=1) / K
                    c = tl.where(k_ok[None, :], af - mean[:, None], 0.0)
                    rstd = tl.rsqrt(tl.sum(c * c, axis=1) / K + eps)
                a = _normalize(af, mean, rstd, NW, NB, rk, k_ok, NORM, HAS_NB).to(dt)  # rounded as stored
            y = _matvec(a.to(tl.float32), w, TWO_D)  # (BLOCK_M, BLOCK_N)
            if ACT == 2:
                y2 = _matvec(a.to(tl.float32), w2, TWO_D)
        else:
            if PDL:
                gdc_wait()
                gdc_launch_dependents()
            mean = tl.zeros([BLOCK_M], tl.float32)
            rstd = tl.zeros([BLOCK_M], tl.float32)
            if NORM != 0:
                mean, rstd = _row_stats(A, rm64, m_ok, K, eps, s_am, NORM, BLOCK_M, BLOCK_K)
            acc = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], tl.float32)
            acc2 = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], tl.float32)
            for k0 in range(0, K, BLOCK_K):
                rk = (k0 + tl.arange(0, BLOCK_K)).to(tl.int64)
                k_ok = rk < K
                w_ok = n_ok[:, None] & k_ok[None, :]
                w = tl.load(W + rn64[:, None] * s_wn + rk[None, :] * s_wk, mask=w_ok, other=0.0)
                a = tl.load(A + rm64[:, None] * s_am + rk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
                if NORM != 0:
                    a = _normalize(a.to(tl.float32), mean, rstd, NW, NB, rk, k_ok, NORM, HAS_NB).to(dt)
                af = a.to(tl.float32)[:, None, :]
                acc += af * w.to(tl.float32)[None, :, :]
                if ACT == 2:
                    w2 = tl.load(W2 + rn64[:, None] * s_w2n + rk[None, :] * s_w2k, mask=w_ok, other=0.0)
                    acc2 += af * w2.to(tl.float32)[None, :, :]
            y = tl.sum(acc, axis=2)  # (BLOCK_M, BLOCK_N)
            y2 = tl.sum(acc2, axis=2)
        if HAS_BIAS:
            y += tl.load(Bias + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        if ACT == 1:  # F.gelu (exact): of the linear's stored (rounded) output
            y = y.to(dt).to(tl.float32)
            y = _gelu_erf(y)
        if ACT == 2:  # silu(gate) * up, each rounded as stored
            if HAS_BIAS2:
                y2 += tl.load(Bias2 + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
            g = y.to(dt).to(tl.float32)
            y = (g * tl.sigmoid(g)).to(dt).to(tl.float32) * y2.to(dt).to(tl.float32)
        out_ok = m_ok[:, None] & n_ok[None, :]
        if HAS_RES:  # the residual stream plus the sublayer's stored output
            y = y.to(dt).to(tl.float32) + tl.load(R + rm64[:, None] * s_rm + rn[None, :], mask=out_ok,
                                                  other=0.0).to(tl.float32)
        tl.store(Y + rm64[:, None] * s_ym + rn[None, :], y.to(dt), mask=out_ok)


def _pdl(device: torch.device) -> bool:
    """Launch with programmatic dependent launch: PDL set and the device capable (decode_attention.pdl_capable)."""
    return PDL and pdl_capable(device)


NORM_KINDS = {"layernorm": 1, "rmsnorm": 2}  # the kernel's NORM (0: none)


def _norm_params(norm):
    """(NORM 0/1/2, weight, bias, eps) of None or a model.LayerNorm / model.RMSNorm (fused_norm's reading of them)."""
    if norm is None:
        return 0, None, None, 0.0
    kind, weight, bias, eps = _norm_module_params(norm)
    return NORM_KINDS[kind], weight, bias, eps


def serves_rows(rows: int, K: int, N: int) -> bool:
    """Whether the kernel takes `rows` rows of K-wide input into N outputs (the other conditions apart): up to
    MAX_ROWS rows, more than 2 only where K is at most WIDE_ROWS_MAX_K (rounded up to a power of two) or the weight
    (N, K) has at most WIDE_ROWS_MAX_WEIGHT elements, more than 1 only where it has at most MULTI_ROW_MAX_WEIGHT."""
    if rows > 1 and N * K > MULTI_ROW_MAX_WEIGHT:
        return False
    return rows <= MAX_ROWS and (rows <= 2 or _pow2(K) <= WIDE_ROWS_MAX_K or N * K <= WIDE_ROWS_MAX_WEIGHT)


def _unsupported(a, weight, bias, norm, act, weight2, bias2, residual) -> Optional[str]:
    """Why the kernel cannot serve these (None when it can)."""
    if norm is not None and getattr(norm, "kind", None) not in NORM_KINDS:
        return f"the kernel knows model.LayerNorm and model.RMSNorm, not {type(norm).__name__}"
    if a.dim() != 2 or weight.dim() != 2 or a.size(1) != weight.size(1):
        return f"shapes a {tuple(a.shape)}, weight {tuple(weight.shape)} (a (M, K), weight (N, K))"
    if a.stride(1) != 1:
        return "a's rows must be contiguous"
    if not serves_rows(a.size(0), a.size(1), weight.size(0)):
        return (f"{a.size(0)} rows of K = {a.size(1)} into N = {weight.size(0)}: the kernel serves up to MAX_ROWS = "
                f"{MAX_ROWS} rows, more than 2 only up to K = WIDE_ROWS_MAX_K = {WIDE_ROWS_MAX_K} or N x K = "
                f"WIDE_ROWS_MAX_WEIGHT = {WIDE_ROWS_MAX_WEIGHT}, more than 1 only up to N x K = MULTI_ROW_MAX_WEIGHT = "
                f"{MULTI_ROW_MAX_WEIGHT} (more rows: cuBLAS's tensor-core matmuls)")
    N, K = weight.shape
    _, nw, nb, _ = _norm_params(norm)
    sized = [(bias, N), (bias2, N), (nw, K), (nb, K)]
    vectors = [t for t, _ in sized if t is not None]
    if any(t is not None and (t.dim() != 1 or t.numel() != n or t.stride(0) != 1) for t, n in sized):
        return "bias and norm parameters must be contiguous vectors of the matching size (N for biases, K for the norm)"
    if act == "swiglu" and (weight2 is None or weight2.shape != weight.shape):
        return "act='swiglu' needs weight2 of weight's shape"
    if residual is not None and (residual.shape != (a.size(0), N) or residual.stride(1) != 1):
        return f"residual must be (M, N) = {(a.size(0), N)} with contiguous rows"
    tensors = [a, weight] + vectors + [t for t in (weight2, residual) if t is not None]
    if a.dtype not in DTYPES or any(t.dtype != a.dtype for t in tensors):
        return "every tensor must share one of fp16/bf16/fp32"
    if any(t.device != a.device for t in tensors):
        return "every tensor must be on one device"
    return kernel_unavailable(a, "the torch ops")


def decode_linear_backend(a, weight, bias=None, *, norm=None, act=None, weight2=None, bias2=None,
                          residual=None) -> str:
    """What backend='auto' runs: 'triton' on CUDA when the kernel serves these tensors, ENABLED is set and
    torch.compile is not tracing, else 'torch'. The one place that chooses."""
    if not ENABLED or a.device.type != "cuda" or torch.compiler.is_compiling():
        return "torch"
    ok = _unsupported(a, weight, bias, norm, act, weight2, bias2, residual) is None
    return "triton" if ok else "torch"


def _config(M: int, N: int, K: int, device: torch.device):
    """(BLOCK_M, BLOCK_N, BLOCK_K, ONE_CHUNK): the column block sized for about PROGRAMS_PER_SM programs per SM
    (a step's matmuls read each weight once: bandwidth wants every SM loading), then cut until the whole K row
    fits the TILE (one chunk: no loop, no dependent round trips); where even MIN_BLOCK_N columns do not fit, a
    loop over K chunks of TILE / (rows x LOOP_BLOCK_N columns)."""
    block_m = min(_pow2(M, 1), MAX_BLOCK_M)
    k_pow2 = _pow2(K)
    want = max(1, N * _cdiv(M, block_m) // (PROGRAMS_PER_SM * _sm_count(device)))
    block_n = max(MIN_BLOCK_N, min(MAX_BLOCK_N, _pow2_floor(want), _pow2(N, 1)))
    fit = TILE // (block_m * k_pow2)
    if fit >= MIN_BLOCK_N:
        return block_m, min(block_n, _pow2_floor(fit)), k_pow2, True
    return block_m, LOOP_BLOCK_N, max(16, min(k_pow2, _pow2_floor(TILE // (block_m * LOOP_BLOCK_N)))), False


def decode_linear(a: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, *, norm=None,
                  act: Optional[str] = None, weight2: Optional[torch.Tensor] = None,
                  bias2: Optional[torch.Tensor] = None, residual: Optional[torch.Tensor] = None,
                  backend: str = "auto") -> torch.Tensor:
    """out = [residual +] act(norm(a) @ weight^T [+ bias] [, norm(a) @ weight2^T [+ bias2]]): a (M, K),
    weight (N, K) (F.linear's), norm None or a model.LayerNorm / model.RMSNorm of K, act None, 'gelu' (exact)
    or 'swiglu' (silu(a W^T + b) * (a W2^T + b2)), residual (M, N). backend: 'auto'
    (decode_linear_backend), 'triton' (an error naming the reason where it cannot run), 'torch'."""
    if act not in ACTS:
        raise ValueError(f"act must be one of {ACTS}, got {act!r}")
    if (act == "swiglu") != (weight2 is not None):
        raise ValueError("weight2 is SwiGLU's up projection: give it with act='swiglu' and only then")
    if backend == "auto":
        backend = decode_linear_backend(a, weight, bias, norm=norm, act=act, weight2=weight2, bias2=bias2,
                                        residual=residual)
    elif backend == "triton":
        why = _unsupported(a, weight, bias, norm, act, weight2, bias2, residual)
        if why is not None:
            raise ValueError(f"decode_linear backend='triton' cannot run: {why}")
    elif backend != "torch":
        raise ValueError(f"backend must be 'auto', 'triton' or 'torch', got {backend!r}")
    if backend == "torch":  # the unfused model's ops, in its order
        h = norm(a) if norm is not None else a
        y = F.linear(h, weight, bias)
        if act == "gelu":
            y = F.gelu(y)
        elif act == "swiglu":
            y = F.silu(y) * F.linear(h, weight2, bias2)
        return y if residual is None else residual + y
    return launch(a, weight, bias, norm=norm, act=act, weight2=weight2, bias2=bias2, residual=residual)


def launch(a, weight, bias=None, *, norm=None, act=None, weight2=None, bias2=None, residual=None) -> torch.Tensor:
    """decode_linear's kernel itself, its arguments not checked again: for callers that already had
    decode_linear_backend say 'triton' for them (a decode step's residual path, model._decode_residual)."""
    M, K = a.shape
    N = weight.size(0)
    kind, nw, nb, eps = _norm_params(norm)
    out = torch.empty(M, N, device=a.device, dtype=a.dtype)
    block_m, block_n, block_k, one_chunk = _config(M, N, K, a.device)
    pdl = _pdl(a.device)
    w2 = weight2 if weight2 is not None else weight
    grid = (_cdiv(N, block_n), _cdiv(M, block_m))
    _decode_linear_kernel[grid](
        a, nw if nw is not None else a, nb if nb is not None else a, weight,
        bias if bias is not None else weight, w2, bias2 if bias2 is not None else weight,
        residual if residual is not None else out, out, M, N, K, eps,
        a.stride(0), weight.stride(0), weight.stride(1), w2.stride(0), w2.stride(1),
        residual.stride(0) if residual is not None else 0, out.stride(0),
        NORM=kind, HAS_NB=nb is not None, HAS_BIAS=bias is not None, HAS_BIAS2=bias2 is not None,
        ACT=ACTS.index(act), HAS_RES=residual is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, ONE_CHUNK=one_chunk, PDL=pdl, TWO_D=PRODUCT_2D,
        num_warps=NUM_WARPS,
        **_pdl_launch(pdl))
    return out

"""
MLA's decoupled RoPE in the training step: the query and key that SDPA reads, built in one Triton kernel forward
and one backward on CUDA.

With decoupled RoPE (model.LatentAttention, mla_rope='decoupled') head i attends with

    Q_i = [q_i | R(t) q^R_i]    (dH + dR)        K_i = [k_i | R(t) k^R]    (dH + dR, k^R one head shared by all)

where R(t) rotates pairs (x[j], x[j + dR/2]) by the angles of position t (model.apply_rope). Written as torch ops
(the rotations, a cat each, k^R expanded to every head) inductor made five elementwise kernels forward and backward,
1.37 ms of GPT-2 MLA's 12 x 1024 step on an H200 beyond the learned-position step's (results/bench/LOG.md,
session 24), about three times what their bytes take at the copy rate. Here:

    forward   Q (B, T, nH, dH + dR) and K (B, T, nH, dH + dR) written from [q_i | q^R_i], k_i and k^R in one pass
    backward  dq = [dQ_i | R(t)^T dQ^R_i]; dk_i = dK_i; dk^R = R(t)^T sum_i dK^R_i (the sum in float32), one pass

Q and K are laid out (B, T, nH, D), so Q.transpose(1, 2) is the (B, nH, T, D) view SDPA takes with no copy (as the
model's q, k and v without RoPE). The rotation runs in float32 with cos and sin rounded to the activations' dtype
first, each output rounded once (as inductor compiles model.apply_rope).

With q_in_place (the model's path: always with K_UP_IN_KERNEL, and by Q_IN_PLACE without it) the query's content
columns are not copied at all: q^R_i is rotated where the up-projection wrote it and that tensor is Q (and, in a
compiled step, dQ^R_i rotated back where SDPA wrote dQ, which then is dq; eager, a copy of dQ is rotated); only K is
built by the forward kernel (and dk, dk^R by the backward one). Under torch.compile the rotation is a
mutating op that inductor writes in place wherever its input dies there, as in the training step.

`decoupled_qk_from_latent` (the model's path with K_UP_IN_KERNEL, its default) folds k_up in as well: K's k_i =
c_K W_UK,i^T are computed inside the K kernel from the dcK-wide latent, read once for all heads, instead of by a
matmul whose nH dH-wide output the kernel would copy.

`decoupled_qk` is the one dispatch point: the kernels on CUDA (and on the CPU under TRITON_INTERPRET=1, for tests),
registered as torch.library triton_ops so that torch.compile keeps each as one call; the same formula in torch ops
everywhere else (backend='torch', or BACKEND).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from decode_attention import (_interpret, _triton_available, device_problem, pipelines_loads, shared_memory,
                              triton_ops_wanted)

# Tuning knobs, read at call time (under torch.compile: when the step is traced).
BACKEND = "auto"  # what decoupled_qk's backend='auto' means: 'auto' (the kernels where they can run), or 'torch'
ROWS = 2  # tokens a program (every head of each; a power of two). H200, GPT-2 MLA (12 heads of 64 + 32), the forward
#          kernel's GPU time a layer (scripts/bench_mla_rope.py, session 24 call 4): 29.6 / 38.2 us at 12x1024 /
#          64x256 (a copy of its bytes 28.4 / 37.5; inductor's torch form 41.2 / 60.4), ROWS 4 31.8 / 41.6, 8 34.2 /
#          45.6, 16 38.5 / 48.8. The training step at ROWS 2 against 4 (same call): 23.57 / 27.52 ms against 23.66 /
#          27.57
NUM_WARPS = 4  # a program's warps (a power of two; the same sweep: 2 or 8 no faster at any ROWS)
K_UP_IN_KERNEL = True  # the model's MLA with decoupled RoPE builds K by decoupled_qk_from_latent: k_i = c_K W_UK,i^T
#                       computed inside the K kernel (the 128-wide latent read once for all heads), not by k_up's
#                       matmul whose nH dH-wide output the kernel then copies; the query rotated in place. H200, GPT-2
#                       MLA shared 128 with decoupled RoPE, --graph_step --master_weights (results/bench/LOG.md,
#                       session 29 calls 1-2): the step off 23.79, 23.84, 23.84 ms, on 23.73, 23.74, 23.82, 23.75 at
#                       12x1024 (medians -0.09 ms, -0.4%); 27.75 / 27.68 at 64x256
K_UP_ROWS = 64  # tokens a program of that kernel (a power of two, 16 or more: the tensor-core product's rows), at
#                3 stages of software pipelining, or 2 where the device's shared memory does not hold 3 (k_up_launch)
K_UP_MAX_LATENT = 128  # the widest key latent the kernel takes; wider ones (and settings below 2 stages) go by k_up's
#                        matmul and the K kernel, which is faster there. H200, bf16, 12x1024, the forward alone
#                        (scripts/bench_k_up, results/bench/LOG.md session 48 call 5), us, kernel at 64 rows and 3 /
#                        2 / 1 stages against the matmul: latent 128: 16.1 / 16.8 / 20.8 against 20.5; 256: 26.3 /
#                        25.4 / 28.3 against 24.0; 512: - / 46.9 / 53.4 against 29.4 (heads of 128: 182.3 at 1 stage
#                        against 77.3); fewer rows slower still
Q_IN_PLACE = True  # what the model passes as decoupled_qk's q_in_place (with K_UP_IN_KERNEL off; on, the query is
#                   always rotated in place). H200, GPT-2 MLA shared 128 with decoupled RoPE,
#                   --graph_step --master_weights (results/bench/LOG.md, session 28 calls 1-2): the step off / on
#                   23.61 / 23.40, 23.97 / 23.79, 23.98 / 23.86 ms at 12x1024 (-0.5 to -0.9%), 27.88 / 27.74 at 64x256;
#                   inductor's output code writes in place both ways (no copy of q or of SDPA's dQ)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
BACKENDS = ("auto", "triton", "torch")
_FWD_OP, _BWD_OP = "tucker_attention::mla_rope_qk_fwd", "tucker_attention::mla_rope_qk_bwd"
_K_FWD_OP, _K_BWD_OP = "tucker_attention::mla_rope_k_fwd", "tucker_attention::mla_rope_k_bwd"
_ROTATE_OP = "tucker_attention::mla_rope_rotate_tail_"
_K_UP_OP = "tucker_attention::mla_rope_k_up_fwd"
_HAVE_TRITON = _triton_available()  # once, at import: not a cached call inside a traced step
_FWD = _BWD = _K_FWD = _K_BWD = _ROTATE = _K_UP = None  # the kernels' torch.library ops, once register_ops made them


def decoupled_qk_torch(q: torch.Tensor, k: torch.Tensor, k_rope: torch.Tensor, cos: torch.Tensor,
                       sin: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """decoupled_qk in torch ops (its reference; differentiable by autograd), model.apply_rope's rotation."""
    from model import apply_rope  # here, not at import: model.py imports this module when it builds an MLA layer
    B, T, nH, _ = k.shape
    dR = k_rope.size(-1)
    dH = q.size(-1) - dR
    q_c, q_r = q.split([dH, dR], dim=-1)
    Q = torch.cat((q_c, apply_rope(q_r, cos[:, None], sin[:, None])), dim=-1)  # (B, T, nH, dH + dR)
    k_r = apply_rope(k_rope, cos, sin).unsqueeze(2).expand(B, T, nH, dR)  # (B, T, nH, dR)
    return Q, torch.cat((k, k_r), dim=-1)  # (B, T, nH, dH + dR) each


if _HAVE_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def _tables(COS, SIN, t, r_ok, dt, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr):
        """cos, sin (ROWS, BLOCK_HALF) fp32 of positions t, rounded to dt first (as apply_rope's .to(x.dtype))."""
        i = tl.arange(0, BLOCK_HALF)
        ok = r_ok[:, None] & (i < HALF)[None, :]
        at = t[:, None] * HALF + i[None, :]
        c = tl.load(COS + at, mask=ok, other=0.0).to(dt).to(tl.float32)
        s = tl.load(SIN + at, mask=ok, other=0.0).to(dt).to(tl.float32)
        return c, s

    @triton.jit
    def _rotated_k_rope(KR, COS, SIN, b, t, r_ok, r_sb, r_st, dt, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr):
        """R(t) k^R of the rows' tokens, its halves (ROWS, BLOCK_HALF) each in dt; and cos, sin (_tables)."""
        i = tl.arange(0, BLOCK_HALF)
        m_t = r_ok[:, None] & (i < HALF)[None, :]
        kr_at = KR + (b * r_sb + t * r_st)[:, None] + i[None, :]
        z1 = tl.load(kr_at, mask=m_t, other=0.0).to(tl.float32)
        z2 = tl.load(kr_at + HALF, mask=m_t, other=0.0).to(tl.float32)
        c, s = _tables(COS, SIN, t, r_ok, dt, HALF, BLOCK_HALF)
        return (z1 * c - z2 * s).to(dt), (z1 * s + z2 * c).to(dt), c, s

    @triton.jit
    def _qk_fwd_kernel(Q, K, KR, COS, SIN, QO, KO, n_rows, T, q_sb, q_st, q_sh, k_sb, k_st, k_sh, r_sb, r_st,
                       NH: tl.constexpr, DH: tl.constexpr, DR: tl.constexpr, ROWS: tl.constexpr,
                       BLOCK_H: tl.constexpr, BLOCK_DH: tl.constexpr, BLOCK_HALF: tl.constexpr,
                       WITH_Q: tl.constexpr):
        """WITH_Q False: K alone (Q, QO unused: q rotated in place by _rotate_tail_kernel)."""
        HALF: tl.constexpr = DR // 2
        W: tl.constexpr = DH + DR
        dt = KO.dtype.element_ty
        r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)  # (ROWS,) flat token rows b T + t
        r_ok = r < n_rows
        b = (r // T).to(tl.int64)  # every input offset in int64: a sequence's slice (T x its row stride, or a
        t = (r % T).to(tl.int64)  # transposed gradient's head stride T x W) passes 2^31 elements at long context
        h = tl.arange(0, BLOCK_H).to(tl.int64)
        j = tl.arange(0, BLOCK_DH)
        i = tl.arange(0, BLOCK_HALF)
        h_ok = h < NH
        m_c = r_ok[:, None, None] & h_ok[None, :, None] & (j < DH)[None, None, :]  # (ROWS, BLOCK_H, BLOCK_DH)
        m_r = r_ok[:, None, None] & h_ok[None, :, None] & (i < HALF)[None, None, :]  # (ROWS, BLOCK_H, BLOCK_HALF)
        out = r.to(tl.int64)[:, None, None] * (NH * W) + h[None, :, None] * W  # (ROWS, BLOCK_H, 1) Q's, K's heads
        # the content parts: copied
        q_at = Q + (b * q_sb + t * q_st)[:, None, None] + h[None, :, None] * q_sh  # (ROWS, BLOCK_H, 1)
        if WITH_Q:
            tl.store(QO + out + j[None, None, :], tl.load(q_at + j[None, None, :], mask=m_c, other=0.0), mask=m_c)
        k_at = K + (b * k_sb + t * k_st)[:, None, None] + h[None, :, None] * k_sh
        tl.store(KO + out + j[None, None, :], tl.load(k_at + j[None, None, :], mask=m_c, other=0.0), mask=m_c)
        # k^R rotated once a token (written into every head's key below); cos, sin (ROWS, BLOCK_HALF)
        y1, y2, c, s = _rotated_k_rope(KR, COS, SIN, b, t, r_ok, r_sb, r_st, dt, HALF, BLOCK_HALF)
        if WITH_Q:  # q^R_i rotated, head by head
            x1 = tl.load(q_at + DH + i[None, None, :], mask=m_r, other=0.0).to(tl.float32)
            x2 = tl.load(q_at + DH + HALF + i[None, None, :], mask=m_r, other=0.0).to(tl.float32)
            c3, s3 = c[:, None, :], s[:, None, :]
            tl.store(QO + out + DH + i[None, None, :], (x1 * c3 - x2 * s3).to(dt), mask=m_r)
            tl.store(QO + out + DH + HALF + i[None, None, :], (x1 * s3 + x2 * c3).to(dt), mask=m_r)
        tl.store(KO + out + DH + i[None, None, :], tl.broadcast_to(y1[:, None, :], (ROWS, BLOCK_H, BLOCK_HALF)),
                 mask=m_r)
        tl.store(KO + out + DH + HALF + i[None, None, :],
                 tl.broadcast_to(y2[:, None, :], (ROWS, BLOCK_H, BLOCK_HALF)), mask=m_r)

    @triton.jit
    def _qk_bwd_kernel(GQ, GK, COS, SIN, DQ, DK, DKR, n_rows, T, q_sb, q_st, q_sh, k_sb, k_st, k_sh,
                       NH: tl.constexpr, DH: tl.constexpr, DR: tl.constexpr, ROWS: tl.constexpr,
                       BLOCK_H: tl.constexpr, BLOCK_DH: tl.constexpr, BLOCK_HALF: tl.constexpr,
                       WITH_Q: tl.constexpr):
        """WITH_Q False: dk and dk^R alone (GQ, DQ unused: dQ rotated back in place by _rotate_tail_kernel)."""
        HALF: tl.constexpr = DR // 2
        W: tl.constexpr = DH + DR
        dt = DK.dtype.element_ty
        r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        r_ok = r < n_rows
        b = (r // T).to(tl.int64)  # int64 offsets, as in the forward
        t = (r % T).to(tl.int64)
        r64 = r.to(tl.int64)
        h = tl.arange(0, BLOCK_H).to(tl.int64)
        j = tl.arange(0, BLOCK_DH)
        i = tl.arange(0, BLOCK_HALF)
        h_ok = h < NH
        m_c = r_ok[:, None, None] & h_ok[None, :, None] & (j < DH)[None, None, :]
        m_r = r_ok[:, None, None] & h_ok[None, :, None] & (i < HALF)[None, None, :]
        gq_at = GQ + (b * q_sb + t * q_st)[:, None, None] + h[None, :, None] * q_sh  # (ROWS, BLOCK_H, 1)
        gk_at = GK + (b * k_sb + t * k_st)[:, None, None] + h[None, :, None] * k_sh
        dq_at = DQ + r64[:, None, None] * (NH * W) + h[None, :, None] * W  # dq (B, T, nH, W) contiguous
        # the content parts: copied (dk_i into dk (B, T, nH, dH), contiguous)
        if WITH_Q:
            tl.store(dq_at + j[None, None, :], tl.load(gq_at + j[None, None, :], mask=m_c, other=0.0), mask=m_c)
        tl.store(DK + r64[:, None, None] * (NH * DH) + h[None, :, None] * DH + j[None, None, :],
                 tl.load(gk_at + j[None, None, :], mask=m_c, other=0.0), mask=m_c)
        c, s = _tables(COS, SIN, t, r_ok, dt, HALF, BLOCK_HALF)
        if WITH_Q:  # R^T on each head's dQ^R: (g1 c + g2 s, g2 c - g1 s)
            c3, s3 = c[:, None, :], s[:, None, :]
            g1 = tl.load(gq_at + DH + i[None, None, :], mask=m_r, other=0.0).to(tl.float32)
            g2 = tl.load(gq_at + DH + HALF + i[None, None, :], mask=m_r, other=0.0).to(tl.float32)
            tl.store(dq_at + DH + i[None, None, :], (g1 * c3 + g2 * s3).to(dt), mask=m_r)
            tl.store(dq_at + DH + HALF + i[None, None, :], (g2 * c3 - g1 * s3).to(dt), mask=m_r)
        # dk^R: the heads' dK^R summed in fp32, then R^T
        e1 = tl.sum(tl.load(gk_at + DH + i[None, None, :], mask=m_r, other=0.0).to(tl.float32), axis=1)
        e2 = tl.sum(tl.load(gk_at + DH + HALF + i[None, None, :], mask=m_r, other=0.0).to(tl.float32), axis=1)
        m_t = r_ok[:, None] & (i < HALF)[None, :]
        dkr_at = DKR + r64[:, None] * DR + i[None, :]
        tl.store(dkr_at, (e1 * c + e2 * s).to(dt), mask=m_t)
        tl.store(dkr_at + HALF, (e2 * c - e1 * s).to(dt), mask=m_t)

    @triton.jit
    def _rotate_tail_kernel(X, COS, SIN, n_rows, T, x_sb, x_st, x_sh,
                            NH: tl.constexpr, DH: tl.constexpr, DR: tl.constexpr, ROWS: tl.constexpr,
                            BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, TRANSPOSE: tl.constexpr):
        """In place: each head's last DR columns of X (B, T, NH, DH + DR), any strides but the last, rotated by R(t)
        (TRANSPOSE False: the forward's q^R_i -> R q^R_i) or R(t)^T (True: the backward's dQ^R_i -> R^T dQ^R_i). A
        program reads both halves of its pairs before it writes either: no other program touches its rows."""
        HALF: tl.constexpr = DR // 2
        dt = X.dtype.element_ty
        r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        r_ok = r < n_rows
        b = (r // T).to(tl.int64)  # int64 offsets, as in the kernels above
        t = (r % T).to(tl.int64)
        h = tl.arange(0, BLOCK_H).to(tl.int64)
        i = tl.arange(0, BLOCK_HALF)
        m_r = r_ok[:, None, None] & (h < NH)[None, :, None] & (i < HALF)[None, None, :]  # (ROWS, BLOCK_H, BLOCK_HALF)
        at = X + (b * x_sb + t * x_st)[:, None, None] + h[None, :, None] * x_sh + DH + i[None, None, :]
        c, s = _tables(COS, SIN, t, r_ok, dt, HALF, BLOCK_HALF)  # (ROWS, BLOCK_HALF)
        c3, s3 = c[:, None, :], s[:, None, :]
        if TRANSPOSE:
            s3 = -s3
        x1 = tl.load(at, mask=m_r, other=0.0).to(tl.float32)
        x2 = tl.load(at + HALF, mask=m_r, other=0.0).to(tl.float32)
        tl.store(at, (x1 * c3 - x2 * s3).to(dt), mask=m_r)
        tl.store(at + HALF, (x1 * s3 + x2 * c3).to(dt), mask=m_r)

    @triton.jit
    def _k_up_fwd_kernel(CK, W, BIAS, KR, COS, SIN, KO, n_rows, T, c_sb, c_st, r_sb, r_st,
                         NH: tl.constexpr, DH: tl.constexpr, DR: tl.constexpr, DC: tl.constexpr,
                         HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_DH: tl.constexpr,
                         BLOCK_DC: tl.constexpr, BLOCK_HALF: tl.constexpr, PRECISION: tl.constexpr):
        """K (B, T, NH, DH + DR) from the latent: k_i = c_K W_i^T (+ b_i) by a tensor-core product a head, the
        latent tile read once for every head (W (NH DH, DC) row-major: nn.Linear's weight), and R k^R written into
        every head's last DR columns. BLOCK_M tokens a program."""
        HALF: tl.constexpr = DR // 2
        WD: tl.constexpr = DH + DR
        dt = KO.dtype.element_ty
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        r_ok = r < n_rows
        b = (r // T).to(tl.int64)
        t = (r % T).to(tl.int64)
        c = tl.arange(0, BLOCK_DC)
        j = tl.arange(0, BLOCK_DH)
        i = tl.arange(0, BLOCK_HALF)
        ck = tl.load(CK + (b * c_sb + t * c_st)[:, None] + c[None, :], mask=r_ok[:, None] & (c < DC)[None, :],
                     other=0.0)  # (BLOCK_M, BLOCK_DC)
        m_t = r_ok[:, None] & (i < HALF)[None, :]
        y1, y2, _, _ = _rotated_k_rope(KR, COS, SIN, b, t, r_ok, r_sb, r_st, dt, HALF, BLOCK_HALF)  # (BLOCK_M, ..)
        row = r.to(tl.int64)[:, None] * (NH * WD)  # (BLOCK_M, 1): K's rows
        m_w = (j < DH)[:, None] & (c < DC)[None, :]
        m_k = r_ok[:, None] & (j < DH)[None, :]
        for h in range(NH):
            w = tl.load(W + (h * DH + j)[:, None] * DC + c[None, :], mask=m_w, other=0.0)  # (BLOCK_DH, BLOCK_DC)
            k = tl.dot(ck, tl.trans(w), input_precision=PRECISION)  # (BLOCK_M, BLOCK_DH) float32
            if HAS_BIAS:
                k += tl.load(BIAS + h * DH + j, mask=j < DH, other=0.0).to(tl.float32)[None, :]
            at = KO + row + h * WD
            tl.store(at + j[None, :], k.to(dt), mask=m_k)
            tl.store(at + DH + i[None, :], y1, mask=m_t)
            tl.store(at + DH + HALF + i[None, :], y2, mask=m_t)

    def _blocks(nH: int, dH: int, dR: int) -> dict:
        """The kernels' constexprs, the knobs checked (they are set by hand, e.g. bench_train --knob)."""
        for name, value, least, most in (("ROWS", ROWS, 1, 1024), ("NUM_WARPS", NUM_WARPS, 1, 32),
                                         ("K_UP_ROWS", K_UP_ROWS, 16, 1024)):
            if not isinstance(value, int) or not least <= value <= most or value & (value - 1):
                raise ValueError(f"fused_mla_rope: {name}={value!r}: a power of two from {least} to {most}")
        return dict(NH=nH, DH=dH, DR=dR, ROWS=ROWS, BLOCK_H=triton.next_power_of_2(nH),
                    BLOCK_DH=triton.next_power_of_2(dH), BLOCK_HALF=triton.next_power_of_2(dR // 2))

    def _fwd_launch(q: Optional[torch.Tensor], k: torch.Tensor, k_rope: torch.Tensor, cos: torch.Tensor,
                    sin: torch.Tensor) -> Tuple[Optional[torch.Tensor], torch.Tensor]:
        """The forward kernel: Q and K, or K alone when q is None (q_in_place: the kernel's Q part off)."""
        B, T, nH, dH = k.shape
        dR = k_rope.size(-1)
        K = k.new_empty(B, T, nH, dH + dR)
        Q = None if q is None else q.new_empty(B, T, nH, dH + dR)
        n = B * T
        blocks = _blocks(nH, dH, dR)  # the knobs checked before the grid divides by ROWS
        if n:  # without the Q part, Q and QO are neither read nor written: k and K stand in
            q_in, q_out = (k, K) if q is None else (q, Q)
            torch.library.wrap_triton(_qk_fwd_kernel)[(triton.cdiv(n, ROWS),)](
                q_in, k, k_rope, cos, sin, q_out, K, n, T, q_in.stride(0), q_in.stride(1), q_in.stride(2),
                k.stride(0), k.stride(1), k.stride(2), k_rope.stride(0), k_rope.stride(1), **blocks,
                WITH_Q=q is not None, num_warps=NUM_WARPS)
        return Q, K

    def _bwd_launch(gq: Optional[torch.Tensor], gk: torch.Tensor, cos: torch.Tensor,
                    sin: torch.Tensor) -> Tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
        """The backward kernel: dq, dk and dk^R, or dk and dk^R alone when gq is None (the kernel's dq part off)."""
        B, T, nH, W = gk.shape
        dR = 2 * cos.size(-1)
        dH = W - dR
        dk = gk.new_empty(B, T, nH, dH)
        dk_rope = gk.new_empty(B, T, dR)
        dq = None if gq is None else gq.new_empty(B, T, nH, W)
        n = B * T
        blocks = _blocks(nH, dH, dR)
        if n:  # without the dq part, GQ and DQ are neither read nor written: gk and dk stand in
            g_in, d_out = (gk, dk) if gq is None else (gq, dq)
            torch.library.wrap_triton(_qk_bwd_kernel)[(triton.cdiv(n, ROWS),)](
                g_in, gk, cos, sin, d_out, dk, dk_rope, n, T, g_in.stride(0), g_in.stride(1), g_in.stride(2),
                gk.stride(0), gk.stride(1), gk.stride(2), **blocks, WITH_Q=gq is not None, num_warps=NUM_WARPS)
        return dq, dk, dk_rope

    def _qk_fwd_impl(q: torch.Tensor, k: torch.Tensor, k_rope: torch.Tensor, cos: torch.Tensor,
                     sin: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return _fwd_launch(q, k, k_rope, cos, sin)

    def _qk_bwd_impl(gq: torch.Tensor, gk: torch.Tensor, cos: torch.Tensor,
                     sin: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _bwd_launch(gq, gk, cos, sin)

    def _k_fwd_impl(k: torch.Tensor, k_rope: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """K alone, for q_in_place."""
        return _fwd_launch(None, k, k_rope, cos, sin)[1]

    def _k_bwd_impl(gk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """dk and dk^R alone, for q_in_place."""
        return _bwd_launch(None, gk, cos, sin)[1:]

    def _rotate_tail_impl(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, transpose: bool) -> None:
        """x (B, T, nH, dH + dR): each head's last dR columns rotated in place by R(t), or R(t)^T if transpose."""
        B, T, nH, W = x.shape
        dR = 2 * cos.size(-1)
        blocks = _blocks(nH, W - dR, dR)
        n = B * T
        if n:
            torch.library.wrap_triton(_rotate_tail_kernel)[(triton.cdiv(n, ROWS),)](
                x, cos, sin, n, T, x.stride(0), x.stride(1), x.stride(2), NH=nH, DH=W - dR, DR=dR, ROWS=ROWS,
                BLOCK_H=blocks["BLOCK_H"], BLOCK_HALF=blocks["BLOCK_HALF"], TRANSPOSE=transpose,
                num_warps=NUM_WARPS)

    def _k_up_fwd_impl(c_k: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], k_rope: torch.Tensor,
                       cos: torch.Tensor, sin: torch.Tensor, n_head: int) -> torch.Tensor:
        """K from the latent c_K (B, T, dc) and k_up's weight (nH dH, dc) (and bias), for K_UP_IN_KERNEL: by
        _k_up_fwd_kernel at k_up_launch's setting, else (a latent wider than K_UP_MAX_LATENT, or no setting fits the
        device's shared memory) by k_up's matmul and the K kernel of decoupled_qk."""
        B, T, dc = c_k.shape
        dR = k_rope.size(-1)
        dH = weight.size(0) // n_head
        n = B * T
        _blocks(n_head, dH, dR)  # the knobs checked
        cuda = c_k.device.type == "cuda"
        launch = k_up_launch(dc, dH, c_k.element_size(), shared_memory(c_k.device)[0] if cuda else None,
                             pipelines_loads(c_k.device))
        if launch is None:
            k = torch.nn.functional.linear(c_k, weight, bias).view(B, T, n_head, dH)
            return _fwd_launch(None, k, k_rope, cos, sin)[1]
        rows, stages = launch
        K = c_k.new_empty(B, T, n_head, dH + dR)
        if n:
            torch.library.wrap_triton(_k_up_fwd_kernel)[(triton.cdiv(n, rows),)](
                c_k, weight, weight if bias is None else bias, k_rope, cos, sin, K, n, T, c_k.stride(0),
                c_k.stride(1), k_rope.stride(0), k_rope.stride(1), NH=n_head, DH=dH, DR=dR, DC=dc,
                HAS_BIAS=bias is not None, BLOCK_M=rows, BLOCK_DH=max(16, triton.next_power_of_2(dH)),
                BLOCK_DC=max(16, triton.next_power_of_2(dc)), BLOCK_HALF=triton.next_power_of_2(dR // 2),
                PRECISION="ieee" if c_k.dtype == torch.float32 else "tf32",  # float32 products in full (a
                num_warps=NUM_WARPS, num_stages=stages)  # matmul may use TF32 there); the 16-bit types' products
        return K                                         # are exact in either


def register_ops() -> bool:
    """Register the kernels as torch.library ops (once) where a device can run them: at import, and by an MLA
    layer with decoupled RoPE as it is built, never inside a traced step (Dynamo would break the graph around a
    registration, as for fused_loss.register_ops). Returns whether the ops are there."""
    global _FWD, _BWD, _K_FWD, _K_BWD, _ROTATE, _K_UP
    if _FWD is None and _HAVE_TRITON and triton_ops_wanted(_interpret()):
        _FWD = torch.library.triton_op(_FWD_OP, _qk_fwd_impl, mutates_args=())
        _BWD = torch.library.triton_op(_BWD_OP, _qk_bwd_impl, mutates_args=())
        _K_FWD = torch.library.triton_op(_K_FWD_OP, _k_fwd_impl, mutates_args=())
        _K_BWD = torch.library.triton_op(_K_BWD_OP, _k_bwd_impl, mutates_args=())
        # mutates x: torch.compile functionalizes the call and inductor writes in place where x dies at it (the
        # query's up-projection output, SDPA's gradient of Q); where it does not, inductor copies x first, as it must
        _ROTATE = torch.library.triton_op(_ROTATE_OP, _rotate_tail_impl, mutates_args={"x"})
        _K_UP = torch.library.triton_op(_K_UP_OP, _k_up_fwd_impl, mutates_args=())
    return _FWD is not None


register_ops()


class _TritonDecoupledQK(torch.autograd.Function):
    """Q and K through the two kernels; saves only the tables (the backward is linear in the gradients)."""

    @staticmethod
    def forward(ctx, q, k, k_rope, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _FWD(q, k, k_rope, cos, sin)

    @staticmethod
    def backward(ctx, grad_q, grad_k):
        cos, sin = ctx.saved_tensors
        # a gradient's last dim must be contiguous (SDPA's are: their other dims may come transposed)
        gq = grad_q if grad_q.stride(-1) == 1 else grad_q.contiguous()
        gk = grad_k if grad_k.stride(-1) == 1 else grad_k.contiguous()
        dq, dk, dk_rope = _BWD(gq, gk, cos, sin)
        return dq, dk, dk_rope, None, None


def _dense(t: torch.Tensor) -> bool:
    """t (B, T, nH, W) laid out contiguous, or as SDPA's gradient ((B, nH, T, W) contiguous, transposed): the two
    layouts whose elements are each stored once, so rotating t in place is a race-free write. Strides compared with
    the two layouts' (dims of size 1 aside), as Dynamo cannot trace Tensor.is_non_overlapping_and_dense nor sort the
    symbolic strides of an exported graph."""
    B, T, nH, W = t.shape
    for layout in ((T * nH * W, nH * W, W, 1), (nH * T * W, W, T * W, 1)):
        if all(size == 1 or stride == want for size, stride, want in zip(t.shape, t.stride(), layout)):
            return True
    return False


class _TritonRotateQInPlace(torch.autograd.Function):
    """q_in_place's query: q's rotary part rotated where it is, q itself returned as Q (marked dirty); backward: dQ's
    rotary part rotated back by R^T where it is, dq is dQ. Saves reading and writing q's dH content columns each
    way, when torch.compile writes in place (see _ROTATE). A Function of its own: autograd lets a Function that
    modifies a view in place (q is one: the up-projection's output reshaped) return one tensor only."""

    @staticmethod
    def forward(ctx, q, cos, sin):
        ctx.save_for_backward(cos, sin)
        _ROTATE(q, cos, sin, False)
        ctx.mark_dirty(q)
        return q

    @staticmethod
    def backward(ctx, grad_q):
        cos, sin = ctx.saved_tensors
        if torch.compiler.is_compiling() and _dense(grad_q):
            # traced: functionalized, so a dQ made inside the graph (SDPA's, in the model's step) is rotated where
            # it lies, and one that something else in the graph reads is copied first. A dQ from outside the graph
            # (Q an output of the compiled region) would have the rotation copied back into it: decoupled_qk's
            # docstring rules that out
            dq = grad_q
        else:  # eager (a gradient autograd hands over is not ours to overwrite), or a dQ in another layout
            dq = grad_q.clone() if grad_q.stride(-1) == 1 else grad_q.contiguous()
        _ROTATE(dq, cos, sin, True)
        return dq, None, None


class _TritonDecoupledK(torch.autograd.Function):
    """q_in_place's key: K by the forward kernel without its Q part, dk and dk^R by the backward kernel without its
    dq part."""

    @staticmethod
    def forward(ctx, k, k_rope, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _K_FWD(k, k_rope, cos, sin)

    @staticmethod
    def backward(ctx, grad_k):
        cos, sin = ctx.saved_tensors
        gk = grad_k if grad_k.stride(-1) == 1 else grad_k.contiguous()
        dk, dk_rope = _K_BWD(gk, cos, sin)
        return dk, dk_rope, None, None


class _TritonKUp(torch.autograd.Function):
    """K_UP_IN_KERNEL's key: K from the latent by _k_up_fwd_kernel; backward: dk and dk^R by the backward kernel
    without its dq part, then k_up's two products as its matmul's backward has them (d c_K = dk W, dW = dk^T c_K,
    db = the sum of dk's rows)."""

    @staticmethod
    def forward(ctx, c_k, weight, bias, k_rope, cos, sin, n_head):
        ctx.save_for_backward(c_k, weight, cos, sin)
        ctx.has_bias = bias is not None
        return _K_UP(c_k, weight, bias, k_rope, cos, sin, n_head)

    @staticmethod
    def backward(ctx, grad_k):
        c_k, weight, cos, sin = ctx.saved_tensors
        gk = grad_k if grad_k.stride(-1) == 1 else grad_k.contiguous()
        dk, dk_rope = _K_BWD(gk, cos, sin)  # (B, T, nH, dH) contiguous, (B, T, dR)
        B, T, dc = c_k.shape
        dk2 = dk.view(B * T, weight.size(0))  # (B T, nH dH)
        need = ctx.needs_input_grad
        d_ck = (dk2 @ weight).view(B, T, dc) if need[0] else None
        d_w = dk2.t() @ c_k.reshape(B * T, dc) if need[1] else None  # (nH dH, dc)
        d_b = dk2.sum(0) if ctx.has_bias and need[2] else None
        return d_ck, d_w, d_b, dk_rope, None, None, None


def k_up_shared_bytes(rows: int, stages: int, dc: int, dh: int, itemsize: int, pipelined: bool = True) -> int:
    """An upper bound of the shared memory (bytes) _k_up_fwd_kernel takes with `rows` tokens a program at `stages`
    of software pipelining, for a latent of dc and heads of dh in a dtype of itemsize bytes: the latent's row tile,
    `stages` tiles of a head's weights in flight, and a float32 (rows, dh) tile for the product's layout changes.
    tests/test_kernels_compile.py holds Triton's sm_80 and sm_90 compiles under it (they take 32-97% of it:
    scripts/shared_memory_survey --k_up). pipelined=False: a GPU before sm_80 (decode_attention.pipelines_loads:
    one step buffered, whatever `stages`), where the product's operands, the row tile and a head's weights, sit in
    shared memory as float32 (an FMA loop) in any dtype; the pipelined bound would under-estimate it there (Triton
    3.6's sm_75 compiles, sm_70's alike, bytes against the pipelined bound: fp16 latent 128, heads 64, 64 rows at 2
    stages 65,536 / 65,536, at 16 rows and 3 stages 40,960 / 57,344; latent 256 at 64 rows and 2 stages 131,072 /
    114,688; latent 512, heads 128, 16 rows at 1 stage 294,912 / 155,648; fp32 latent 32, heads 16, 32 rows at 1
    stage 6,144 / 8,192): exactly these."""
    bdc, bdh = max(16, 1 << (dc - 1).bit_length()), max(16, 1 << (dh - 1).bit_length())
    if not pipelined:
        return (rows + bdh) * bdc * 4
    return rows * bdc * itemsize + max(1, stages) * bdh * bdc * itemsize + rows * bdh * 4


def k_up_launch(dc: int, dh: int, itemsize: int, limit: Optional[int],
                pipelined: bool = True) -> Optional[Tuple[int, int]]:
    """(tokens a program, pipelining stages) of _k_up_fwd_kernel for a latent of dc, heads of dh, a dtype of itemsize
    bytes: the first of k_up_ladder() whose k_up_shared_bytes is within `limit` (a program's shared memory at most on
    the device: decode_attention.shared_memory; None: no limit, the interpreter); None (k_up's matmul and the K
    kernel serve) for a latent wider than K_UP_MAX_LATENT or where none fits, as the kernel is the slower there
    (K_UP_MAX_LATENT's figures). GPT-2 MLA's 128-wide latent: (K_UP_ROWS, 3) in bf16 (80 KB) on every GPU, in float32
    (144 KB) on an H200 or A100; float32 on a GPU of 100 KB an SM (99 KB a program): the matmul. Without those, a
    512-wide latent asked 264-456 KB a program, more than any GPU gives (OutOfResources)."""
    if dc > K_UP_MAX_LATENT:
        return None
    for rows, stages in k_up_ladder():
        if limit is None or k_up_shared_bytes(rows, stages, dc, dh, itemsize, pipelined) <= limit:
            return rows, stages
    return None


def k_up_ladder() -> list:
    """k_up_launch's (rows, stages) in its order of preference: K_UP_ROWS at 3 stages, then 2 (at 1 stage, or fewer
    rows, the kernel is no faster than the matmul even for a 128-wide latent: K_UP_MAX_LATENT's figures)."""
    return [(K_UP_ROWS, 3), (K_UP_ROWS, 2)]


def unsupported(q: torch.Tensor, k: torch.Tensor, k_rope: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> Optional[str]:
    """Why the kernels cannot take these inputs now (None when they can)."""
    why = device_problem(q.device, _interpret())
    if why:
        return why
    if any(x.device != q.device for x in (k, k_rope, cos, sin)):
        return (f"devices q {q.device}, k {k.device}, k_rope {k_rope.device}, cos {cos.device}, sin {sin.device} "
                f"(all must be one)")
    if not _HAVE_TRITON:
        return "triton is not installed"
    if q.dtype not in DTYPES or k.dtype != q.dtype or k_rope.dtype != q.dtype:
        return f"dtypes q {q.dtype}, k {k.dtype}, k_rope {k_rope.dtype} (one of fp16/bf16/fp32, all the same)"
    if any(x.stride(-1) != 1 for x in (q, k, k_rope)):
        return "q, k and k_rope need their last dim contiguous"
    if not (cos.is_contiguous() and sin.is_contiguous()):
        return "cos and sin must be contiguous"
    return None


def _check_shapes(q, k, k_rope, cos, sin) -> None:
    if k.dim() != 4 or q.dim() != 4 or k_rope.dim() != 3:
        raise ValueError(f"decoupled_qk: q (B, T, nH, dH + dR), k (B, T, nH, dH), k_rope (B, T, dR); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(k_rope.shape)}")
    B, T, nH, dH = k.shape
    dR = k_rope.size(-1)
    if dR % 2 or tuple(q.shape) != (B, T, nH, dH + dR) or tuple(k_rope.shape[:2]) != (B, T):
        raise ValueError(f"decoupled_qk: q {tuple(q.shape)} must be (B, T, nH, dH + dR) = {(B, T, nH, dH + dR)} "
                         f"and k_rope {tuple(k_rope.shape)} (B, T, dR) with dR even")
    if cos.shape != sin.shape or tuple(cos.shape) != (T, dR // 2):
        raise ValueError(f"decoupled_qk: cos / sin {tuple(cos.shape)} / {tuple(sin.shape)}: (T, dR/2) = {(T, dR // 2)}")


def _backend(backend: Optional[str]) -> str:
    """backend as given (None: BACKEND), checked."""
    backend = BACKEND if backend is None else backend
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {BACKENDS}")
    return backend


def decoupled_qk_from_latent(q: torch.Tensor, c_k: torch.Tensor, k_weight: torch.Tensor,
                             k_bias: Optional[torch.Tensor], k_rope: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                             backend: Optional[str] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """decoupled_qk with k_up folded in: k = c_k k_weight^T (+ k_bias), c_k (B, T, dc) the key latent (any strides but
    a contiguous last dim), k_weight (nH dH, dc) contiguous (nn.Linear's layout), k_bias (nH dH) or None, in c_k's
    dtype. On the kernels' path q is rotated in place as with q_in_place (its contract applies) and K is built from
    c_k by one kernel; torch ops: F.linear, then decoupled_qk_torch."""
    backend = _backend(backend)
    if q.dim() != 4 or k_rope.dim() != 3:
        raise ValueError(f"decoupled_qk_from_latent: q (B, T, nH, dH + dR), k_rope (B, T, dR); got {tuple(q.shape)}, "
                         f"{tuple(k_rope.shape)}")
    B, T, nH, W = q.shape
    dR = k_rope.size(-1)
    dH = W - dR
    if c_k.dim() != 3 or tuple(c_k.shape[:2]) != (B, T) or tuple(k_weight.shape) != (nH * dH, c_k.size(-1)):
        raise ValueError(f"decoupled_qk_from_latent: c_k {tuple(c_k.shape)} must be (B, T, dc) = ({B}, {T}, dc) and "
                         f"k_weight {tuple(k_weight.shape)} (nH dH, dc) = ({nH * dH}, dc), with nH = {nH} and dH = "
                         f"{dH} from q {tuple(q.shape)} less k_rope's {dR}")
    if k_bias is not None and tuple(k_bias.shape) != (nH * dH,):
        raise ValueError(f"decoupled_qk_from_latent: k_bias {tuple(k_bias.shape)} must be ({nH * dH},)")
    for name, t in (("k_weight", k_weight), ("k_bias", k_bias)):
        if t is not None and (t.dtype != c_k.dtype or t.device != c_k.device):
            raise ValueError(f"decoupled_qk_from_latent: {name} is {t.dtype} on {t.device}, c_k {c_k.dtype} on "
                             f"{c_k.device}: cast it (the model passes k_up's weight .to(c_k.dtype))")
    _check_shapes(q, q[..., :dH], k_rope, cos, sin)  # k's shape stands in: the same checks of q, k_rope, cos, sin
    why = unsupported(q, c_k, k_rope, cos, sin) if backend != "torch" else "backend='torch'"
    if why is None and (not k_weight.is_contiguous() or (k_bias is not None and not k_bias.is_contiguous())):
        why = "k_weight and k_bias must be contiguous"
    if why is not None:
        if backend == "triton":
            raise ValueError(f"fused_mla_rope.decoupled_qk_from_latent: the Triton kernels cannot run: {why}")
        k = torch.nn.functional.linear(c_k, k_weight, k_bias).view(B, T, nH, dH)
        return decoupled_qk_torch(q, k, k_rope, cos, sin)
    return (_TritonRotateQInPlace.apply(q, cos, sin),
            _TritonKUp.apply(c_k, k_weight, k_bias, k_rope, cos, sin, nH))


def decoupled_qk(q: torch.Tensor, k: torch.Tensor, k_rope: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 backend: Optional[str] = None, q_in_place: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """SDPA's query and key with decoupled RoPE, differentiable.

    q (B, T, nH, dH + dR): each head's [q_i | q^R_i], q^R unrotated; k (B, T, nH, dH): each head's key; k_rope (B, T,
    dR): the shared rotary key, unrotated; cos, sin (T, dR/2): the angles' rows of the T positions (model.rope_at).
    Any strides but a contiguous last dim. Returns Q = [q_i | R q^R_i] and K = [k_i | R k^R], both (B, T, nH, dH +
    dR), contiguous (Q: unless q_in_place). backend 'auto' (None: BACKEND): the Triton kernels where they can run,
    else torch ops; 'triton': the kernels or a ValueError; 'torch': torch ops (decoupled_qk_torch). q_in_place=True
    lets the kernels rotate q's rotary part where it is and return q itself as Q (q then must be a tensor the caller
    no longer reads, not a leaf: the model's up-projection output; its layout is kept, not made contiguous). Under
    torch.compile the backward then also rotates the incoming dQ where it lies, so Q must be consumed inside the same
    compiled graph (the model's SDPA), never returned out of it: a gradient handed in from outside would be
    overwritten. Torch ops ignore q_in_place."""
    backend = _backend(backend)
    _check_shapes(q, k, k_rope, cos, sin)
    why = unsupported(q, k, k_rope, cos, sin) if backend != "torch" else "backend='torch'"
    if why is not None:
        if backend == "triton":
            raise ValueError(f"fused_mla_rope.decoupled_qk: the Triton kernels cannot run: {why}")
        return decoupled_qk_torch(q, k, k_rope, cos, sin)
    if q_in_place:
        return _TritonRotateQInPlace.apply(q, cos, sin), _TritonDecoupledK.apply(k, k_rope, cos, sin)
    return _TritonDecoupledQK.apply(q, k, k_rope, cos, sin)

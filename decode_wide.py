"""
The decode step of a GPT at 5 .. MAX_ROWS sequences as ONE persistent Triton kernel, its products on tensor cores.

decode_mega's step keeps a tile's activation rows in registers and multiplies them on CUDA cores: it serves up to
decode_mega.MAX_ROWS (4) sequences. At batch 32 the model's default step is ~84 kernels a token (cuBLAS GEMMs,
the split attention, its merge, norms; results/bench/LOG.md), of which ~0.35-0.44 ms do not depend on the
context: Tucker's small cache is then read in about as long as the launches around it take. Here the same grid
of resident programs (decode_mega's barriers) runs every layer as six phases,

    A   [q | k | v] = norm1(x0) W_qkv^T (+ b): a program per tile of BN output columns, all rows at once (tl.dot,
        K in steps of BK), each row normalized on the fly from its statistics (below); q stored, k and v written
        into the caches at `pos`
    B1  attention of the new token to rows 0 .. pos, split over programs, each step's rows in ATTN_GROUPS groups a
        warp each (_attention_groups: no reduction across warps inside the loop), a partial a group; a split's whole
        steps unmasked, its last partial step masked after the loop (_group_rows)
    B2  a program per MERGE_HEADS (sequence, query head) pairs: their partials merged, each head's output o stored
        (rounded)
    D   x1 = x0 + (o W_O^T + b_O): a program per tile of output columns, the residual added in the epilogue
    E   h = gelu(norm2(x1) W_fc^T + b_fc)
    F   x2 = x1 + (h W_proj^T + b_proj)

then the final norm and the LM head, with the embeddings as a phase before layer 0. The phases that write the
residual stream (the embeddings, D, F) add their columns' share of each row's sum and sum of squares into STATS
(fp32 atomics, 2 x B x 2 floats: the stream x0/x2 and x1), and the norms' consumers (A, E, the LM head) read a
row's mean and variance from them (var = E[x^2] - mean^2, in fp32) instead of reducing whole rows first. A norm's
weight and bias are folded into the matrix after it (W' = W diag(g), b' = b + W beta, built with the stacked
weights), so a product's loop normalizes a chunk of rows with two numbers a row and loads nothing else beside its
operands (a norm-weight load per step of the loop, outside Triton's pipelining, cost A and E 4-6 us a layer).
D's and F's K is split over SPLIT_D / SPLIT_F programs a tile (F's 3,072 in 24 steps on 48 programs was the slowest
phase): each adds its part into an fp32 buffer and counts its arrival; the last one adds the bias and the
residual, zeroes the buffer and the count. Rounding: each op's result is rounded to the activations' dtype as in
the unfused model, but for the folded norms (the normalized rows are rounded before W', not after the weight and
bias) and the split sums; the statistics and the split sums arrive in any order, so the logits vary run to run
in their last bits. Tested to float32 rounding against the model in float32, to bf16's in bf16.

Served: what decode_mega serves (MHA, GQA, MQA, MLA and Tucker merged, learned positions or RoPE as decode_mega
says, GELU MLP, LayerNorm / RMSNorm), 5 .. MAX_ROWS sequences (decode_mega.step_decoder picks this class above
decode_mega.MAX_ROWS), bf16, fp16 or fp32 weights, PROGRAMS_PER_SM programs an SM where its shared memory holds
them, fewer where not (fp32's tiles, twice bf16's, or a GPU of 100 KB an SM: one; _check_fits).
Tested in Triton's interpreter on the CPU, a phase a launch (ONLY), against GPT.decode_step; on the GPU the phases
run behind grid barriers in one launch.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

import decode_mega as dm
from decode_attention import (_cdiv, _interpret, _pow2, _pow2_floor, _triton_available, pipelines_loads,
                              program_reserve, shared_memory)

MAX_ROWS = 32  # sequences a step serves at most: a product's rows are one tl.dot operand (BLOCK_M x BK), and at 64
#               (BLOCK_M 64) the LM head's pipelined tiles take 128 KB of shared memory a program, so two programs no
#               longer fit an H200's SM (one an SM would run: _check_fits; scripts/mega_sass --batch)
BN = 16  # output columns a tile of the layers' products (tl.dot's least)
BK = 128  # K a step of a product's loop
BN_LM = 64  # the LM head's output columns a tile (session 24 call 6, H200, batch 32 at 16k, alternating, Tucker / Tucker
#              shared ms: 64 0.7212 / 0.5528 and 0.7167 / 0.5538, 32 0.7279 / 0.5550 and 0.7278 / 0.5504; 128 does not fit
#              two programs an SM at 4 stages)
NUM_WARPS = 4
PROGRAMS_PER_SM = 2  # programs of NUM_WARPS warps an SM (all resident at once: PROGRAMS_PER_SM x NUM_WARPS x 32
#                      threads x MAXNREG registers within an SM's 65,536)
MAXNREG = None  # registers a thread at most (Triton's maxnreg; None: the compiler's choice, up to 255), e.g. 168 for
#                 3 programs of 4 warps an SM (session 22 call 5, H200, batch 32 at 16k, Tucker / Tucker shared ms:
#                 2 programs, no cap 0.7514 / 0.5699; 3 at 168 registers 0.8277 / 0.6519; 4 at 128, 3 stages 0.8946 /
#                 0.7320: the caps spill)
STAGES = 4  # loads in flight ahead in the products' and the attention's loops (Triton's software pipelining;
#             session 21 on an H100, Tucker at batch 32 and 16k: 2 stages 1.30 ms, 3 1.077, 4 1.057; session 22
#             call 4, H200, with ATTN_GROUPS: 3 stages 0.7496 / Tucker shared 0.5747 against 0.7502 / 0.5737;
#             session 23 call 2, each loop at its own depth (tl.range num_stages; knobs reverted), against 0.7173 /
#             0.5591 and 0.7167 / 0.5516: the layers' products at 7 stages 0.7278 / 0.5634, at 5 0.7302 / 0.5532,
#             at 9 with the LM head at 3 0.7450 / 0.5713; B1 at 6 0.7586 / 0.5735, at 3 0.7165 / 0.5523; BK 256 at
#             3 stages 0.7460 / 0.6022)
SPLIT_D = 2  # programs a tile of phase D's output columns is split over along its K (nH Dv), each adding its part
#              into an fp32 buffer; the last to arrive adds the residual (1: no split, no atomics)
SPLIT_F = 4  # the same for phase F (K = the MLP's hidden width: 3,072 for GPT-2, 24 steps of BK unsplit)
#             (session 21 call 3, H200, batch 32 at 16k, Tucker / Tucker shared ms: SPLIT_F 2 0.8226 / 0.7563, 4
#             0.8039 / 0.7387, 8 0.8301 / 0.7628; SPLIT_D 1 0.8142 / 0.7413, 2 0.8039 / 0.7387; session 22 call 6,
#             the epilogue's loads ahead of the loops: SPLIT_D 1 0.7318 / 0.5629, 2 0.7288 / 0.5712 and 0.7327 /
#             0.5711)
BLOCK_N = None  # cache rows a step of an attention split's loop; None: ATTN_ROWS by whether K and V are one latent,
#                fewer where a row is wider than ATTN_STEP_ELEMS allows (WideDecoder.attn_rows)
ATTN_ROWS = {False: 64, True: 128}  # BLOCK_N=None: rows a step for separate K and V / a shared latent (session 21,
#                                     H200, batch 32 and 16k: the shared latent at 64 rows ran at 2.2 TB/s against
#                                     separate K, V's 3.6 (call 3); Tucker at 128 rows 0.7609 ms against 0.7409 at
#                                     64, Tucker shared at 256 rows 0.6146 against 0.6297 at 128 (call 5); with
#                                     ATTN_GROUPS, session 22 call 2: Tucker shared at 128 rows 0.5826 against
#                                     0.5995 at 256; session 23 call 1: Tucker at 128 rows, 2 groups of 64,
#                                     0.7445 against 0.7155 at 64)
ATTN_STEP_ELEMS = 8192  # BLOCK_N=None: a step's rows hold at most this many K and V elements (a row: DK + DV, or DK
#                         for a shared latent), so wide rows take fewer of them (powers of two, at least 16 a group):
#                         Tucker's and MQA's 64 x (64 + 64) and Tucker shared's 128 x 64 are at the limit, MLA's
#                         shared latent of 128 takes 64 rows (session 25 call 4, H200, MLA shared 128 at batch 32 and
#                         16k: 128 rows 0.8494 / 0.8446 ms, 120 B of stack; 64 rows 0.7880 / 0.7945, no spills).
#                         Keys rotated as read (a shared latent with RoPE, MLA's latent RoPE) count twice: the
#                         rotated halves beside the read ones (Tucker shared with RoPE at 128 rows: 272 B of stack at
#                         sm_90, at 64: 40 B)
ATTN_GROUPS = {False: 2, True: 4}  # B1, by whether K and V are one latent: a step's cache rows in this many groups,
#                                   each a warp's own (a batched tl.dot puts one group on a warp): the softmax's row
#                                   max and sum, and the probabilities' trip into the second product, stay inside
#                                   the warp, no block-wide reductions a step. 1: decode_mega's 2D splits (their
#                                   reductions cross the warps every step). Session 22 call 2, H200, batch 32 at 16k,
#                                   ms: Tucker 1 group of 64 rows 0.7452, 2 of 32 0.7387, 4 of 16 0.7593, 4 of 32
#                                   0.7660; Tucker shared 1 of 256 0.6190, 4 of 64 0.5995, 4 of 32 0.5826. Each
#                                   group's partial is a split of its own for B2 (call 3: the groups merged at the
#                                   end of each item instead, across the warps, made B2 cheaper and B1 dearer:
#                                   Tucker 0.7480 / 0.7472 against 0.7472, Tucker shared 0.5757 / 0.5800 against
#                                   0.5699; removed)
MERGE_HEADS = None  # B2's (sequence, query head) pairs a program, loaded at once (a power of two; None: the least
#                    that gives every program at most one item: batch 32 x 12 heads on 264 programs, 2; session 22
#                    call 6, Tucker / Tucker shared ms: 1 a program 0.7498 / 0.5773, 2 0.7288 / 0.5712; session 23
#                    call 3, B2 folded into B1 instead, each sequence's last item merging its 12 heads 4 or 8 at a
#                    time, no barrier between (knob reverted): 0.7479 / 0.6520 and 0.7234 / 0.5542 against 0.7161 /
#                    0.5490)
ONLY_EMBED, ONLY_LM = 7, 8  # the interpreter's launches of the embeddings and of the final norm + LM head
PHASES = (1, 2, 3, 4, 5, 6)  # a layer's launches phase by phase (A, B1, B2, D, E, F: their ONLY codes)


if _triton_available():
    import triton
    import triton.language as tl

    from decode_linear import _gelu_erf
    from decode_mega import (_attention_splits, _grid_sync, _query_at_base, _query_halves, _split_item, _stamp,
                             _stamp_sm, _store_qkv, _table_angles, _turn)

    @triton.jit
    def _row_stats(STATS, slot, rm, m_ok, d, eps, NORM: tl.constexpr, BLOCK_M: tl.constexpr):
        """(mean, rstd) of rows rm of the stream whose sums slot holds (STATS (2, BLOCK_M, 2): sum x, sum x^2):
        LayerNorm's (NORM 1) or RMSNorm's (2, mean 0)."""
        at = STATS + slot * (BLOCK_M * 2) + rm * 2
        s1 = tl.load(at, mask=m_ok, other=0.0, cache_modifier=".cg")
        s2 = tl.load(at + 1, mask=m_ok, other=0.0, cache_modifier=".cg")
        if NORM == 2:
            mean = tl.zeros([BLOCK_M], tl.float32)
            rstd = tl.rsqrt(s2 / d + eps)
        else:
            mean = s1 / d
            rstd = tl.rsqrt(tl.maximum(s2 / d - mean * mean, 0.0) + eps)
        return mean, rstd

    @triton.jit
    def _add_stats(STATS, slot, x, rm, m_ok, BLOCK_M: tl.constexpr):
        """The rows' partial sums of x and x^2 (x (BLOCK_M, columns) fp32, zero outside) added into slot."""
        at = STATS + slot * (BLOCK_M * 2) + rm * 2
        tl.atomic_add(at, tl.sum(x, axis=1), mask=m_ok, sem="relaxed", scope="gpu")
        tl.atomic_add(at + 1, tl.sum(x * x, axis=1), mask=m_ok, sem="relaxed", scope="gpu")

    @triton.jit
    def _product(A, W, t, N, K, k_lo, k_hi, rm, m_ok, STATS, slot, C, d, eps, BN: tl.constexpr, BK: tl.constexpr,
                 NORM: tl.constexpr, DOT_PREC: tl.constexpr):
        """(BLOCK_M, BN) fp32: rows rm of A (B, K), columns k_lo .. k_hi - 1, times rows t*BN .. t*BN + BN - 1 of
        W (N, K) there, transposed; in steps of BK, the operands straight from their loads. NORM 1 or 2: the rows of
        A normalized without weight and bias (LayerNorm: (x - mean) rstd, RMSNorm: x rstd; statistics from STATS'
        slot; W holds the norm's weight), applied to the product: rstd (x W^T - mean C), C (N,) fp32 W's row sums;
        0: A as it is."""
        rn = t * BN + tl.arange(0, BN)
        n_ok = rn < N
        rb = tl.arange(0, BN)
        w_base = W + (t * BN + tl.zeros([], tl.int64)) * K  # the tile's first row; 32-bit offsets from it
        if NORM != 0:  # loaded before the loop: in flight during it (after it, a round trip of their own)
            mean, rstd = _row_stats(STATS, slot, rm, m_ok, d, eps, NORM, rm.shape[0])
            if NORM == 1:
                c_row = tl.load(C + rn, mask=n_ok, other=0.0)
        acc = tl.zeros([rm.shape[0], BN], tl.float32)
        for k0 in range(k_lo, k_hi, BK):
            rk = k0 + tl.arange(0, BK)
            k_ok = rk < k_hi
            a = tl.load(A + rm[:, None] * K + rk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0,
                        cache_modifier=".cg")  # (BLOCK_M, BK): written by other programs in this launch
            w = tl.load(w_base + rb[:, None] * K + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            acc += tl.dot(a, tl.trans(w), input_precision=DOT_PREC)  # (BLOCK_M, BN)
        if NORM != 0:
            if NORM == 1:
                acc -= mean[:, None] * c_row[None, :]
            acc = acc * rstd[:, None]
        return acc

    @triton.jit
    def _normed_linear(A, W, Bias, C, t, N, D, rm, m_ok, STATS, slot, eps, BN: tl.constexpr, BK: tl.constexpr,
                       NORM: tl.constexpr, DOT_PREC: tl.constexpr):
        """norm(rows rm of the stream A (B, D)) W^T + Bias for output columns t*BN .., the norm folded into W and
        Bias (C W's row sums; _product): (y (BLOCK_M, BN) fp32, the columns rn, their mask)."""
        rn = t * BN + tl.arange(0, BN)
        n_ok = rn < N
        bias = tl.load(Bias + rn, mask=n_ok, other=0.0).to(tl.float32)  # before the product's loop (in flight)
        y = _product(A, W, t, N, D, 0, D, rm, m_ok, STATS, slot, C, D, eps, BN, BK, NORM, DOT_PREC)
        return y + bias[None, :], rn, n_ok

    @triton.jit
    def _split_residual_phase(A, W, Bias, R, OUT, ACC, CNT, STATS, slot, pid, nprog, N, K, rm, m_ok, dt,
                              BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr,
                              DOT_PREC: tl.constexpr):
        """OUT = R + (A W^T + Bias) over the program's items: tiles of BN output columns, each split along K over
        SPLIT items (SPLIT 1: the tile's product, then _residual_out; else each item's part added into ACC (B, N)
        fp32 and its arrival counted in CNT[tile]: the last to arrive reads the sum, adds bias and residual
        (_residual_out), and zeroes ACC's tile and the count for the next use)."""
        k_step = tl.cdiv(tl.cdiv(K, SPLIT), BK) * BK  # a split's K, whole steps of BK
        for item in range(pid, tl.cdiv(N, BN) * SPLIT, nprog):
            t = item // SPLIT
            k_lo = (item % SPLIT) * k_step
            bias, r = _residual_in(Bias, R, t, N, rm, m_ok, BN)  # before the loop (in flight), used by the last
            y = _product(A, W, t, N, K, k_lo, tl.minimum(k_lo + k_step, K), rm, m_ok, STATS, slot, Bias, 1, 1.0,
                         BN, BK, 0, DOT_PREC)
            if SPLIT == 1:
                _residual_out(y, bias, r, OUT, STATS, slot, t, N, rm, m_ok, dt, BN, BLOCK_M)
            else:
                rn = t * BN + tl.arange(0, BN)
                at = ACC + rm[:, None] * N + rn[None, :]
                ok = m_ok[:, None] & (rn < N)[None, :]
                tl.atomic_add(at, y, mask=ok, sem="relaxed", scope="gpu")
                tl.debug_barrier()  # every thread's adds issued before the (one-thread) release below
                arrived = tl.atomic_add(CNT + t, 1, sem="acq_rel", scope="gpu")
                if arrived == SPLIT - 1:  # the tile's last part: the others' adds are visible (acquire)
                    total = tl.load(at, mask=ok, other=0.0, cache_modifier=".cg")
                    _residual_out(total, bias, r, OUT, STATS, slot, t, N, rm, m_ok, dt, BN, BLOCK_M)
                    tl.store(at, tl.zeros([BLOCK_M, BN], tl.float32), mask=ok)
                    tl.store(CNT + t, 0)

    @triton.jit
    def _residual_in(Bias, R, t, N, rm, m_ok, BN: tl.constexpr):
        """The bias (BN,) and the residual rows (rm, BN) fp32 of output columns t*BN .. (_residual_out's inputs)."""
        rn = t * BN + tl.arange(0, BN)
        n_ok = rn < N
        bias = tl.load(Bias + rn, mask=n_ok, other=0.0).to(tl.float32)
        r = tl.load(R + rm[:, None] * N + rn[None, :], mask=m_ok[:, None] & n_ok[None, :], other=0.0,
                    cache_modifier=".cg").to(tl.float32)
        return bias, r

    @triton.jit
    def _residual_out(y, bias, r, OUT, STATS, slot, t, N, rm, m_ok, dt, BN: tl.constexpr, BLOCK_M: tl.constexpr):
        """A sublayer's tile of output columns t*BN ..: x = r + (y + bias) (_residual_in's), each rounded as the
        unfused ops store them, into OUT (B, N); its rows' partial statistics into STATS' slot."""
        rn = t * BN + tl.arange(0, BN)
        n_ok = rn < N
        ok = m_ok[:, None] & n_ok[None, :]
        y = (y + bias[None, :]).to(dt).to(tl.float32)
        x = (y + r).to(dt)
        tl.store(OUT + rm[:, None] * N + rn[None, :], x, mask=ok)
        _add_stats(STATS, slot, tl.where(ok, x.to(tl.float32), 0.0), rm, m_ok, BLOCK_M)

    @triton.jit
    def _group_softmax(qk, m_i, l_i, qk_scale, r_ok, MASKED: tl.constexpr):
        """One step of _attention_groups' online softmax: the scores qk (GROUPS, BLOCK_H, SUB, unscaled) of a group's
        SUB cache rows; running max m_i and sum l_i (GROUPS, BLOCK_H, scaled by qk_scale, base 2). MASKED: rows where
        r_ok (GROUPS, SUB) is false count for nothing (a split's last, partial step); else (r_ok None) every row is
        real, so the max is finite from the first step on and needs no guard. The scale is applied to the row max and
        inside exp2's argument (one fused multiply-add an element): max(qk) qk_scale is max(qk qk_scale), as
        qk_scale > 0. Returns (m_new, l_i, the weights p, alpha: the factor of the output so far)."""
        if MASKED:
            qk = tl.where(r_ok[:, None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=2) * qk_scale)
        if MASKED:
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a group with no row yet: exp2(-inf) = 0
        else:
            m_use = m_new
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(qk * qk_scale - m_use[:, :, None])
        l_i = l_i * alpha + tl.sum(p, axis=2)
        return m_new, l_i, p, alpha

    @triton.jit
    def _group_rows(q3, k, v, m_i, l_i, acc, qk_scale, r_ok, MASKED: tl.constexpr, DOT_PREC: tl.constexpr):
        """_group_softmax's step for queries q3 (GROUPS, BLOCK_H, DK) against a group's SUB cache rows k (GROUPS,
        SUB, DK), values v (GROUPS, SUB, DV), output acc (GROUPS, BLOCK_H, DV)."""
        qk = tl.dot(q3, tl.permute(k, (0, 2, 1)), input_precision=DOT_PREC)  # (GROUPS, BLOCK_H, SUB), unscaled
        m_new, l_i, p, alpha = _group_softmax(qk, m_i, l_i, qk_scale, r_ok, MASKED)
        acc = acc * alpha[:, :, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PREC)
        return m_new, l_i, acc

    @triton.jit
    def _group_step_rope(q_lo, q_hi, COS, SIN, n0, t_at, kh_at, v_at, m_i, l_i, acc, acc_lo, acc_hi, qk_scale, r_ok,
                         MASKED: tl.constexpr, SHARED_KV: tl.constexpr, DOT_PREC: tl.constexpr):
        """_attention_groups' step of rows n0 + offsets for keys cached unrotated (ROPE 2), in halves (RoPE's pairs:
        dims i and i + DK/2, no exchange of elements between threads): the queries' halves q_lo, q_hi (BLOCK_H,
        DK/2) turned back by R(n0) (decode_mega._query_at_base), the rows' halves at kh_at (the low ones; GROUPS,
        SUB, DK/2) turned by R(j), j their offsets in the step (the tables at t_at); then _group_softmax. A shared
        latent's value is the unrotated halves, into acc_lo, acc_hi (GROUPS, BLOCK_H, DK/2); else values at v_at
        into acc. MASKED: the split's last, partial step (rows where r_ok (GROUPS, SUB) is false read nothing).
        Returns (m_i, l_i, acc, acc_lo, acc_hi)."""
        HALF: tl.constexpr = kh_at.shape[2]
        GROUPS: tl.constexpr = kh_at.shape[0]
        dt = kh_at.dtype.element_ty
        qb_lo, qb_hi = _query_at_base(q_lo, q_hi, COS, SIN, n0, dt)
        ok = r_ok[:, :, None] if MASKED else None
        c, sn = _table_angles(COS, SIN, t_at, ok, dt)
        if MASKED:
            k_lo = tl.load(kh_at, mask=ok, other=0.0, cache_modifier=".cg")
            k_hi = tl.load(kh_at + HALF, mask=ok, other=0.0, cache_modifier=".cg")
        else:
            k_lo = tl.load(kh_at, cache_modifier=".cg")  # row pos was written in phase A
            k_hi = tl.load(kh_at + HALF, cache_modifier=".cg")
        # in dt at every op, model.apply_rope's roundings (in fp32 with one rounding: 4-9% slower at batch 32, more
        # spills; session 26 call 3, Tucker shared with RoPE at 4k / 16k: 0.4941-0.5035 / 0.8270-0.8336 ms against
        # 0.4722-0.4802 / 0.7577-0.7644)
        kr_lo, kr_hi = _turn(k_lo, k_hi, c, sn, dt)
        q3_lo = tl.broadcast_to(qb_lo[None, :, :], (GROUPS, qb_lo.shape[0], qb_lo.shape[1]))
        q3_hi = tl.broadcast_to(qb_hi[None, :, :], (GROUPS, qb_hi.shape[0], qb_hi.shape[1]))
        qk = tl.dot(q3_lo, tl.permute(kr_lo, (0, 2, 1)), input_precision=DOT_PREC)  # (GROUPS, BLOCK_H, SUB)
        qk += tl.dot(q3_hi, tl.permute(kr_hi, (0, 2, 1)), input_precision=DOT_PREC)
        m_i, l_i, p, alpha = _group_softmax(qk, m_i, l_i, qk_scale, r_ok, MASKED)
        if SHARED_KV:  # the value is the unrotated latent: its halves
            acc_lo = acc_lo * alpha[:, :, None] + tl.dot(p.to(dt), k_lo, input_precision=DOT_PREC)
            acc_hi = acc_hi * alpha[:, :, None] + tl.dot(p.to(dt), k_hi, input_precision=DOT_PREC)
        else:
            if MASKED:
                v = tl.load(v_at, mask=ok, other=0.0, cache_modifier=".cg")
            else:
                v = tl.load(v_at, cache_modifier=".cg")
            acc = acc * alpha[:, :, None] + tl.dot(p.to(dt), v, input_precision=DOT_PREC)
        return m_i, l_i, acc, acc_lo, acc_hi

    @triton.jit
    def _attention_groups(Q, KC, VC, PO, PM, PL, COS, SIN, pid, nprog, B, layer64, max_len, length, chunk, n_split,
                          s_max, qk_scale, NH: tl.constexpr, NKV: tl.constexpr, HPG: tl.constexpr, DK: tl.constexpr,
                          DV: tl.constexpr, SHARED_KV: tl.constexpr, ROPE: tl.constexpr, BLOCK_H: tl.constexpr,
                          BLOCK_N: tl.constexpr, GROUPS: tl.constexpr, DOT_PREC: tl.constexpr):
        """Phase B1 as decode_mega._attention_splits (items (sequence, KV head, split) pid, pid + nprog, ..., the
        split's `chunk` rows), each step's BLOCK_N rows in GROUPS groups of SUB consecutive rows, one online softmax
        a group (a batched product: Triton's 3D tl.dot puts each group on its own warp). The split's whole steps
        run without masks, their row pointers advanced a step at a time; its last, partial step (if any) masked,
        after the loop (_group_rows; ROPE 2: _group_step_rope). Group g of split s stores its partial as split s
        GROUPS + g: PO, PM, PL at ((sequence x NKV + head) x s_max GROUPS + s GROUPS + g) x BLOCK_H + the head's
        index in its group. A group with no row keeps m = -inf, l = 0, o = 0 (its weight in the merge: 0). ROPE 2:
        the keys are cached unrotated and rotated here as read, in halves (_group_step_rope); a shared latent's
        value is the unrotated halves, its output in halves."""
        SUB: tl.constexpr = BLOCK_N // GROUPS
        HALF: tl.constexpr = DK // 2
        V_HALVES: tl.constexpr = (ROPE == 2) & SHARED_KV  # the value is the unrotated latent: its halves
        hh = tl.arange(0, BLOCK_H)
        gg = tl.arange(0, GROUPS)
        jj = tl.arange(0, SUB)
        ev = tl.arange(0, DV)
        ek = tl.arange(0, DK)
        eh = tl.arange(0, HALF)
        offs = gg[:, None] * SUB + jj[None, :]  # (GROUPS, SUB) the rows' offsets in a step
        t_at = offs[:, :, None] * HALF + eh[None, None, :]  # (GROUPS, SUB, HALF) their angles in the tables (ROPE 2)
        for item in range(pid, B * NKV * n_split, nprog):
            bg, s, q, k_base, v_base, start, end = _split_item(Q, KC, VC, item, B, layer64, max_len, length, chunk,
                                                               n_split, NH, NKV, HPG, DK, DV, BLOCK_H)
            q3 = tl.broadcast_to(q[None, :, :], (GROUPS, BLOCK_H, DK))
            m_i = tl.full([GROUPS, BLOCK_H], float("-inf"), tl.float32)
            l_i = tl.zeros([GROUPS, BLOCK_H], tl.float32)
            acc = tl.zeros([GROUPS, BLOCK_H, DV], tl.float32)
            rows = start + offs  # (GROUPS, SUB) the first step's rows
            k_at = k_base + rows[:, :, None] * DK + ek[None, None, :]  # (GROUPS, SUB, DK)
            v_at = v_base + rows[:, :, None] * DV + ev[None, None, :]  # (GROUPS, SUB, DV)
            if ROPE == 2:
                q_lo, q_hi = _query_halves(Q, bg, NH, NKV, HPG, DK, BLOCK_H)  # (BLOCK_H, HALF) each
                kh_at = k_base + rows[:, :, None] * DK + eh[None, None, :]  # (GROUPS, SUB, HALF) the low halves
                acc_lo = tl.zeros([GROUPS, BLOCK_H, HALF], tl.float32)  # a shared latent's output in halves (else
                acc_hi = tl.zeros([GROUPS, BLOCK_H, HALF], tl.float32)  # unused, and dropped by the compiler)
            whole = start + (end - start) // BLOCK_N * BLOCK_N  # the split's rows in whole steps end here
            for n0 in range(start, whole, BLOCK_N):
                if ROPE == 2:
                    m_i, l_i, acc, acc_lo, acc_hi = _group_step_rope(q_lo, q_hi, COS, SIN, n0, t_at, kh_at, v_at, m_i,
                                                                     l_i, acc, acc_lo, acc_hi, qk_scale, None, False,
                                                                     SHARED_KV, DOT_PREC)  # no mask
                    kh_at += BLOCK_N * DK
                else:
                    k = tl.load(k_at, cache_modifier=".cg")  # row pos was written in phase A
                    if SHARED_KV:  # the latent is key and value: one read
                        v = k
                    else:
                        v = tl.load(v_at, cache_modifier=".cg")
                    m_i, l_i, acc = _group_rows(q3, k, v, m_i, l_i, acc, qk_scale, None, False, DOT_PREC)  # no mask
                    k_at += BLOCK_N * DK
                v_at += BLOCK_N * DV
            if whole < end:  # the split's last, partial step
                r_ok = (whole + offs) < end  # (GROUPS, SUB)
                if ROPE == 2:
                    m_i, l_i, acc, acc_lo, acc_hi = _group_step_rope(q_lo, q_hi, COS, SIN, whole, t_at, kh_at, v_at,
                                                                     m_i, l_i, acc, acc_lo, acc_hi, qk_scale, r_ok,
                                                                     True, SHARED_KV, DOT_PREC)
                else:
                    k = tl.load(k_at, mask=r_ok[:, :, None], other=0.0, cache_modifier=".cg")
                    if SHARED_KV:
                        v = k
                    else:
                        v = tl.load(v_at, mask=r_ok[:, :, None], other=0.0, cache_modifier=".cg")
                    m_i, l_i, acc = _group_rows(q3, k, v, m_i, l_i, acc, qk_scale, r_ok, True, DOT_PREC)
            slot = ((bg * s_max + s) * GROUPS + gg[:, None]) * BLOCK_H + hh[None, :]  # (GROUPS, BLOCK_H)
            if V_HALVES:
                tl.store(PO + slot[:, :, None] * DV + eh[None, None, :], acc_lo)
                tl.store(PO + slot[:, :, None] * DV + HALF + eh[None, None, :], acc_hi)
            else:
                tl.store(PO + slot[:, :, None] * DV + ev[None, None, :], acc)
            tl.store(PM + slot, m_i)
            tl.store(PL + slot, l_i)

    @triton.jit
    def _merged_heads(PO, PM, PL, O, f0, n_pairs, s_max, n_split, NH: tl.constexpr, NKV: tl.constexpr,
                      HPG: tl.constexpr, DV: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_SM: tl.constexpr,
                      MERGE_HEADS: tl.constexpr, dt):
        """decode_mega._merged_head for the MERGE_HEADS (sequence, query head) pairs f0 .. (flat: sequence NH + head;
        those from n_pairs on skipped), their partials loaded at once; each head's output rounded as stored into O
        (B, NH DV)."""
        f = f0 + tl.arange(0, MERGE_HEADS)
        f_ok = f < n_pairs
        b = f // NH
        h = f % NH
        ss = tl.arange(0, BLOCK_SM)
        ev = tl.arange(0, DV)
        ok = f_ok[:, None] & (ss < n_split)[None, :]  # (MERGE_HEADS, BLOCK_SM)
        at = ((b * NKV + h // HPG)[:, None] * s_max + ss[None, :]) * BLOCK_H + (h % HPG)[:, None]
        pm = tl.load(PM + at, mask=ok, other=float("-inf"), cache_modifier=".cg")
        pl = tl.load(PL + at, mask=ok, other=0.0, cache_modifier=".cg")
        po = tl.load(PO + at[:, :, None] * DV + ev[None, None, :], mask=ok[:, :, None], other=0.0,
                     cache_modifier=".cg")  # (MERGE_HEADS, BLOCK_SM, DV)
        top = tl.max(pm, axis=1)
        w = tl.where(ok, tl.exp2(pm - tl.where(f_ok, top, 0.0)[:, None]), 0.0)
        l_all = tl.where(f_ok, tl.sum(w * pl, axis=1), 1.0)
        o = tl.sum(w[:, :, None] * po, axis=1) / l_all[:, None]  # (MERGE_HEADS, DV)
        tl.store(O + (b * (NH * DV) + h * DV)[:, None] + ev[None, :], o.to(dt), mask=f_ok[:, None])

    @triton.jit
    def _wide_step_kernel(
            IDX, POS, WTE, WPE, COS, SIN, WQKV, BQKV, CQKV, KC, VC, WO, BO, WFC, BFC, CFC, WPR, BPR, WLM, BLM, CLM,
            X, X1, STATS, Q, O, H, ACC, CNT, PO, PM, PL, LOGITS, SYNC, ERR, TIMES,
            B, layer_lo, layer_hi, vocab, max_len, eps, qk_scale, s_max,
            D: tl.constexpr, HIDDEN: tl.constexpr, NH: tl.constexpr, NKV: tl.constexpr, HPG: tl.constexpr,
            DK: tl.constexpr, DV: tl.constexpr, N_QKV: tl.constexpr, SHARED_KV: tl.constexpr, ROPE: tl.constexpr,
            NORM: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BN_LM: tl.constexpr,
            SPLIT_D: tl.constexpr, SPLIT_F: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
            BLOCK_SM: tl.constexpr, MIN_CHUNK: tl.constexpr, GROUPS: tl.constexpr, MERGE_HEADS: tl.constexpr,
            DOT_PREC: tl.constexpr,
            ONLY: tl.constexpr, FIRST: tl.constexpr, FINAL: tl.constexpr, MAX_SPIN: tl.constexpr,
            TIMING: tl.constexpr):
        """The embeddings (FIRST), layers layer_lo .. layer_hi - 1, then the final norm and the LM head (FINAL).
        ONLY 0: every phase, a grid barrier after each; else one phase alone (the interpreter's launches, no
        barrier): 1-6 A, B1, B2, D, E, F, 7 the embeddings, 8 the LM head.

        Buffers: X the stream x0 (a layer's input) and x2 (its output, the next one's x0), X1 its middle x1, each
        written column tile by column tile; STATS[0] the sums of X's rows (the embeddings store them whole, F adds
        its columns'; zeroed by program 0 in B1, after A read them), STATS[1] of X1's (D adds, zeroed in A after the
        previous layer's E read them); Q the queries, O the attention's merged outputs (nH DV a row), H the MLP's
        hidden activations; ACC (B, d) fp32 and CNT (a count a column tile) D's and F's split sums, zero between
        uses.
        W_qkv, W_fc and the LM head hold their norm's weight, BQKV, BFC and BLM (fp32) its bias (folded), CQKV, CFC,
        CLM (fp32) their row sums (the mean's term). TIMING (ONLY 0): this program's stamps in TIMES, 4 a slot
        (decode_mega's: arrival ns and cycles, release ns and cycles): slot 0 the start (its third column the SM),
        1 the barrier after the embeddings, 2 + 6 l + i the barrier after layer l's phase i (A, B1, B2, D, E, F),
        6 L + 2 the end."""
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        dt = X.dtype.element_ty
        pos = tl.load(POS)  # the new token's row; rows 0 .. pos are attended
        length = pos + 1
        rm = tl.arange(0, BLOCK_M)
        m_ok = rm < B
        KO: tl.constexpr = NH * DV  # the output projection's K
        barriers = 0
        STAMP = TIMES + pid * (4 * (6 * (layer_hi - layer_lo) + 3))
        _stamp(STAMP, TIMING)
        _stamp_sm(STAMP + 2, TIMING)
        if FIRST & ((ONLY == 0) | (ONLY == 7)):  # ---- x0 = wte[token] (+ wpe[pos]), a row a program, its sums whole
            rk = tl.arange(0, BLOCK_D)
            k_ok = rk < D
            for b in range(pid, B, nprog):
                tok = tl.load(IDX + b)
                x = tl.load(WTE + tok * D + rk, mask=k_ok, other=0.0).to(tl.float32)
                if not ROPE:  # learned positions (with RoPE the model has no wpe: WPE is a placeholder)
                    x += tl.load(WPE + pos * D + rk, mask=k_ok, other=0.0).to(tl.float32)
                x = x.to(dt)
                tl.store(X + b * D + rk, x, mask=k_ok)
                xf = x.to(tl.float32)
                tl.store(STATS + b * 2, tl.sum(xf, axis=0))
                tl.store(STATS + b * 2 + 1, tl.sum(xf * xf, axis=0))
            if ONLY == 0:
                barriers += 1
                _grid_sync(SYNC, barriers * nprog, ERR, STAMP + 4, MAX_SPIN, TIMING)
        for layer in range(layer_lo, layer_hi):
            layer64 = layer + tl.zeros([], tl.int64)  # int64 offsets (the interpreter hands a Python int)
            at_l = STAMP + 4 * (2 + 6 * (layer - layer_lo))  # the stamps of this layer's first barrier
            # ---- A: [q | k | v] = norm1(x0) W_qkv^T + b_qkv; k, v into the caches at pos
            if (ONLY == 0) | (ONLY == 1):
                if pid == 0:  # x1's sums start from zero (their last reader: the previous layer's E)
                    tl.store(STATS + BLOCK_M * 2 + rm * 2, tl.zeros([BLOCK_M], tl.float32))
                    tl.store(STATS + BLOCK_M * 2 + rm * 2 + 1, tl.zeros([BLOCK_M], tl.float32))
                for t in range(pid, tl.cdiv(N_QKV, BN), nprog):
                    y, rn, n_ok = _normed_linear(X, WQKV + layer64 * N_QKV * D, BQKV + layer * N_QKV,
                                                 CQKV + layer * N_QKV, t, N_QKV, D, rm, m_ok, STATS, 0, eps, BN, BK,
                                                 NORM, DOT_PREC)
                    _store_qkv(y.to(dt), rn, rm, m_ok[:, None] & n_ok[None, :], Q, KC, VC, B, layer64, pos, max_len,
                               NH, NKV, DK, DV, SHARED_KV, COS, SIN, ROPE)
            if ONLY == 0:
                barriers += 1
                _grid_sync(SYNC, barriers * nprog, ERR, at_l, MAX_SPIN, TIMING)
            # ---- B1: the attention's splits (the cache rows split over programs)
            chunk = tl.maximum(tl.cdiv(tl.cdiv(length, s_max), BLOCK_N) * BLOCK_N, MIN_CHUNK)
            n_split = tl.cdiv(length, chunk)
            if (ONLY == 0) | (ONLY == 2):
                if pid == 0:  # x2's sums start from zero (read last in A)
                    tl.store(STATS + rm * 2, tl.zeros([BLOCK_M], tl.float32))
                    tl.store(STATS + rm * 2 + 1, tl.zeros([BLOCK_M], tl.float32))
                if GROUPS == 1:
                    _attention_splits(Q, KC, VC, PO, PM, PL, COS, SIN, pid, nprog, B, layer64, max_len, length,
                                      chunk, n_split, s_max, qk_scale, NH, NKV, HPG, DK, DV, SHARED_KV, ROPE, BLOCK_H,
                                      BLOCK_N, DOT_PREC)
                else:
                    _attention_groups(Q, KC, VC, PO, PM, PL, COS, SIN, pid, nprog, B, layer64, max_len, length,
                                      chunk, n_split, s_max, qk_scale, NH, NKV, HPG, DK, DV, SHARED_KV, ROPE, BLOCK_H,
                                      BLOCK_N, GROUPS, DOT_PREC)
            if ONLY == 0:
                barriers += 1
                _grid_sync(SYNC, barriers * nprog, ERR, at_l + 4, MAX_SPIN, TIMING)
            # ---- B2: a program per MERGE_HEADS (sequence, query head) pairs: their partials merged, o rounded as
            # stored
            if (ONLY == 0) | (ONLY == 3):
                for item in range(pid, tl.cdiv(B * NH, MERGE_HEADS), nprog):
                    _merged_heads(PO, PM, PL, O, item * MERGE_HEADS, B * NH, s_max * GROUPS, n_split * GROUPS, NH,
                                  NKV, HPG, DV, BLOCK_H, BLOCK_SM, MERGE_HEADS, dt)  # a group's partial a split
            if ONLY == 0:
                barriers += 1
                _grid_sync(SYNC, barriers * nprog, ERR, at_l + 8, MAX_SPIN, TIMING)
            # ---- D: x1 = x0 + (o W_O^T + b_O)
            if (ONLY == 0) | (ONLY == 4):
                _split_residual_phase(O, WO + layer64 * D * KO, BO + layer * D, X, X1, ACC, CNT, STATS, 1, pid, nprog,
                                      D, KO, rm, m_ok, dt, BN, BK, SPLIT_D, BLOCK_M, DOT_PREC)
            if ONLY == 0:
                barriers += 1
                _grid_sync(SYNC, barriers * nprog, ERR, at_l + 12, MAX_SPIN, TIMING)
            # ---- E: h = gelu(norm2(x1) W_fc^T + b_fc)
            if (ONLY == 0) | (ONLY == 5):
                for t in range(pid, tl.cdiv(HIDDEN, BN), nprog):
                    y, rn, n_ok = _normed_linear(X1, WFC + layer64 * HIDDEN * D, BFC + layer * HIDDEN,
                                                 CFC + layer * HIDDEN, t, HIDDEN, D, rm, m_ok, STATS, 1, eps, BN, BK,
                                                 NORM, DOT_PREC)
                    y = _gelu_erf(y.to(dt).to(tl.float32))  # F.gelu of the linear's stored output
                    tl.store(H + rm[:, None] * HIDDEN + rn[None, :], y.to(dt), mask=m_ok[:, None] & n_ok[None, :])
            if ONLY == 0:
                barriers += 1
                _grid_sync(SYNC, barriers * nprog, ERR, at_l + 16, MAX_SPIN, TIMING)
            # ---- F: x2 = x1 + (h W_proj^T + b_proj), the next layer's x0
            if (ONLY == 0) | (ONLY == 6):
                _split_residual_phase(H, WPR + layer64 * D * HIDDEN, BPR + layer * D, X1, X, ACC, CNT, STATS, 0, pid,
                                      nprog, D, HIDDEN, rm, m_ok, dt, BN, BK, SPLIT_F, BLOCK_M, DOT_PREC)
            if ONLY == 0:
                barriers += 1
                _grid_sync(SYNC, barriers * nprog, ERR, at_l + 20, MAX_SPIN, TIMING)
        # ---- the final norm and the LM head
        if FINAL & ((ONLY == 0) | (ONLY == 8)):
            for t in range(pid, tl.cdiv(vocab, BN_LM), nprog):
                y, rn, n_ok = _normed_linear(X, WLM, BLM, CLM, t, vocab, D, rm, m_ok, STATS, 0, eps, BN_LM, BK, NORM,
                                             DOT_PREC)
                tl.store(LOGITS + rm[:, None] * vocab + rn[None, :], y.to(dt), mask=m_ok[:, None] & n_ok[None, :])
        if TIMING:
            tl.debug_barrier()
            _stamp(STAMP + 4 * (6 * (layer_hi - layer_lo) + 2), TIMING)


class WideDecoder(dm.MegaDecoder):
    """decode_mega.MegaDecoder's one-launch step for MAX_ROWS >= batch > decode_mega.MAX_ROWS: the same interface
    (decode_step(idx, caches, pos) -> logits, check()), the same stacked weights and caches, the wide kernel."""

    @staticmethod
    def _rows():
        return dm.MAX_ROWS + 1, MAX_ROWS

    @staticmethod
    def _check_knobs() -> None:
        rows = [("BLOCK_N", BLOCK_N)] if BLOCK_N is not None else [(f"ATTN_ROWS[{k}]", v) for k, v in ATTN_ROWS.items()]
        for name, value in [("BN", BN), ("BK", BK), ("BN_LM", BN_LM)] + rows:
            if not isinstance(value, int) or value < 16 or value & (value - 1):
                raise ValueError(f"decode_wide: {name}={value!r}: a power of two >= 16 (a tl.dot operand's side)")
        if not isinstance(ATTN_STEP_ELEMS, int) or ATTN_STEP_ELEMS < 16:
            raise ValueError(f"decode_wide: ATTN_STEP_ELEMS={ATTN_STEP_ELEMS!r}: an int >= 16 (K and V elements a "
                             f"step's rows hold at most)")
        if MERGE_HEADS is not None and (not isinstance(MERGE_HEADS, int) or MERGE_HEADS < 1
                                        or MERGE_HEADS & (MERGE_HEADS - 1)):
            raise ValueError(f"decode_wide: MERGE_HEADS={MERGE_HEADS!r}: None or a power of two (pairs a program)")
        if MAXNREG is not None and (not isinstance(MAXNREG, int) or not 32 <= MAXNREG <= 255):
            raise ValueError(f"decode_wide: MAXNREG={MAXNREG!r}: None or an int from 32 to 255 (registers a thread)")
        for name, value in (("SPLIT_D", SPLIT_D), ("SPLIT_F", SPLIT_F)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"decode_wide: {name}={value!r}: a positive int (programs a tile's K is split over)")
        groups = ATTN_GROUPS if isinstance(ATTN_GROUPS, dict) else {False: ATTN_GROUPS, True: ATTN_GROUPS}
        for shared, g in groups.items():
            if not isinstance(g, int) or g < 1 or g & (g - 1):
                raise ValueError(f"decode_wide: ATTN_GROUPS={ATTN_GROUPS!r}: a power of two >= 1 (groups of a "
                                 f"step's rows), or a dict of them by whether K and V are one latent")
            rows_form = BLOCK_N if BLOCK_N is not None else ATTN_ROWS[shared]
            if g > 1 and rows_form // g < 16:
                name = "BLOCK_N" if BLOCK_N is not None else f"ATTN_ROWS[{shared}]"
                raise ValueError(f"decode_wide: {name}={rows_form!r}: with ATTN_GROUPS={g} a group's "
                                 f"{rows_form // g} rows, fewer than 16 (a tl.dot operand's side)")

    def shared_bytes(self, pipelined: bool = True) -> int:
        """The shared memory a program takes, as Triton allocates it: its loops' software-pipelined buffers (STAGES -
        1 steps in flight) reuse one space, so the largest loop's: the products' (a BLOCK_M x BK row tile and a
        BN_LM x BK weight tile, the LM head's being the widest) or the attention's (a step's cache rows of K, and of
        V unless they are one latent). tests/test_decode_wide.py holds it to the sm_90 compile's.
        pipelined=False: a GPU before sm_80 (V100, T4; decode_attention.pipelines_loads), where Triton buffers one
        step and a tl.dot's operands go through shared memory as float32 (an FMA loop): in fp32 both operands of a
        product at once, a shared latent twice (as K and as V); in bf16 / fp16 one upcast operand at a time. Triton
        3.6's sm_75 compiles at batch 5 / 16 / 32 (sm_70's alike; tests/test_decode_wide.py holds two): fp16 32,768 B
        for Tucker, Tucker shared and MLA shared 128 (the 64 x 128 LM head tile, or a 128 x 64 K / V step), against
        61,440 / 61,440 / 73,728 pipelined; fp32 Tucker 40,960 / 40,960 / 49,152, Tucker shared and MLA 65,536."""
        block_m = _pow2(self.batch, 16)
        product = (block_m + max(BN, BN_LM)) * BK
        if pipelined:
            attention = self.attn_rows() * (self.dk + (0 if self.shared else self.dv))
            return (STAGES - 1) * max(product, attention) * self.dtype.itemsize
        if self.dtype == torch.float32:  # both operands of one product stored before either is read
            attention = self.attn_rows() * (self.dk + self.dv)
        else:  # each operand upcast, stored and read before the other's store: one live at a time
            product = max(block_m, BN, BN_LM) * BK
            attention = self.attn_rows() * max(self.dk, self.dv)
        return max(product, attention) * 4

    def attn_rows(self) -> int:
        """Cache rows a step of B1's loop: BLOCK_N as set, else ATTN_ROWS[shared], halved while a step would hold
        more than ATTN_STEP_ELEMS K and V elements (keys rotated as read, rope 2: their rotated copy counts too),
        but at least 16 rows a group."""
        if BLOCK_N is not None:
            return BLOCK_N
        shared = bool(self.shared)
        groups = ATTN_GROUPS[shared] if isinstance(ATTN_GROUPS, dict) else ATTN_GROUPS
        width = self.dk + (0 if shared else self.dv) + (self.dk if self.rope == 2 else 0)  # elements a row holds
        rows = min(ATTN_ROWS[shared], _pow2_floor(max(1, ATTN_STEP_ELEMS // width)))
        return max(rows, 16 * groups)

    def _check_fits(self) -> Optional[int]:
        """Programs of shared_bytes() each (plus the 1 KB an SM reserves a program from sm_80 on: program_reserve)
        that an SM's shared memory holds on this GPU (decode_attention.shared_memory): every program must be
        resident, or the barriers would wait for programs that cannot start, so the step runs min(PROGRAMS_PER_SM,
        this) an SM. H200 (228 KB an SM):
        two at the default tiles in bf16 / fp16 (73,728 B a program at batch 32), one for fp32 weights (twice bf16's
        tiles: 120 KB a program at batch 5) or BK 256 at 4 stages (120 KB); a GPU of 100 KB an SM (RTX 4090, L40,
        A10): one at the default tiles; a T4 (64 KB an SM, no pipelining: shared_bytes(pipelined=False), and no
        reserve a program before sm_80): two in fp16 (32,768 B a program at batch 32; the pipelined estimate, 73,728
        B, refused even one), one in fp32 (a shared latent's 65,536 B: all of it). A program beyond what one
        launch may take is refused by name. None (no limit) in the interpreter."""
        if self.device.type != "cuda" or _interpret():
            return None
        per_block, per_sm = shared_memory(self.device)
        pipelined = pipelines_loads(self.device)
        need = self.shared_bytes(pipelined=pipelined)
        reserve = program_reserve(self.device)  # 1 KB a program from sm_80 on, none before
        if need > per_block or per_sm // (need + reserve) < 1:
            raise ValueError(f"decode_wide: {self.dtype} weights, BK={BK}, STAGES={STAGES}, batch {self.batch}: a "
                             f"program's {'pipelined ' if pipelined else ''}tiles take {need} B of shared memory, "
                             f"more than this GPU gives one program ({per_block} B; every program must be resident "
                             f"for the grid barriers): lower decode_wide.STAGES or BK, or decode with decode='auto'")
        return per_sm // (need + reserve)

    @staticmethod
    def _launch_shape():
        return NUM_WARPS, PROGRAMS_PER_SM, "decode_wide", MAXNREG or 255

    @staticmethod
    def _proj_transposed() -> bool:
        return False  # W_proj (d, hidden): phase F's tiles are its rows

    def _stacked_weights(self) -> dict:
        """MegaDecoder's stacked weights, with each norm folded into the matrix after it (rebuilt with them): W_qkv,
        W_fc and the LM head times their norm's weight along K (in fp32, then rounded), their biases plus W times
        the norm's bias (fp32; the LM head gets one: W_lm beta_f), and the folded matrices' row sums (cqkv, cfc,
        clm, fp32)."""
        w = super()._stacked_weights()
        if "blm" in w:
            return w
        f32 = torch.float32
        folded = {}
        with torch.no_grad():
            def fold(name, weight, nw, nb, bias):  # weight (..., N, K), nw / nb (..., K), bias (..., N)
                folded["w" + name] = (weight.to(f32) * nw.to(f32).unsqueeze(-2)).to(weight.dtype).contiguous()
                folded["b" + name] = bias.to(f32) + (weight.to(f32) @ nb.to(f32).unsqueeze(-1)).squeeze(-1)
                folded["c" + name] = folded["w" + name].to(f32).sum(-1)  # its row sums, as rounded: the mean's term
            fold("qkv", w["wqkv"], w["n1w"], w["n1b"], w["bqkv"])
            fold("fc", w["wfc"], w["n2w"], w["n2b"], w["bfc"])
            lm = self.model.lm_head.weight
            fold("lm", lm, w["nfw"], w["nfb"], torch.zeros(lm.size(0), device=lm.device))
        w.update(folded)  # all at once (a fold that raised leaves the stacked weights unfolded)
        return w

    def _buffers(self) -> None:
        B, dev, f32 = self.batch, self.device, torch.float32
        self.block_m = _pow2(B, 16)
        self.groups = ATTN_GROUPS[bool(self.shared)] if isinstance(ATTN_GROUPS, dict) else ATTN_GROUPS
        parts = B * self.nKV * self.s_max * self.groups * self.block_h  # a group's partial a split
        self.merge_heads = MERGE_HEADS or _pow2(_cdiv(B * self.nH, self.programs), 1)  # B2's pairs a program: one round
        self.x = torch.zeros(B, self.d, device=dev, dtype=self.dtype)  # the stream x0 / x2
        self.x1 = torch.zeros(B, self.d, device=dev, dtype=self.dtype)  # x0 + attention
        self.stats = torch.zeros(2, self.block_m, 2, device=dev, dtype=f32)  # sums of x, x^2 of X's and X1's rows
        self.q = torch.zeros(B, self.nH * self.dk, device=dev, dtype=self.dtype)
        self.o = torch.zeros(B, self.nH * self.dv, device=dev, dtype=self.dtype)  # the attention's merged heads
        self.h = torch.zeros(B, self.hidden, device=dev, dtype=self.dtype)
        self.acc = torch.zeros(B, self.d, device=dev, dtype=f32)  # D's and F's split sums (zero between uses)
        self.tile_counts = torch.zeros(_cdiv(self.d, 16), device=dev, dtype=torch.int32)  # their arrivals a tile
        self.block_n = self.attn_rows()
        self.po = torch.zeros(parts, self.dv, device=dev, dtype=f32)
        self.pm = torch.zeros(parts, device=dev, dtype=f32)
        self.pl = torch.zeros(parts, device=dev, dtype=f32)
        self.logits = torch.zeros(B, self.vocab, device=dev, dtype=self.dtype)

    def _launch(self, w: dict, idx, pos, only: int, layer_lo: int, layer_hi: int, first: bool, final: bool) -> None:
        tr = self.model.transformer
        _wide_step_kernel[(self.programs,)](
            idx, pos, tr.wte.weight, *self._position_tables(), w["wqkv"], w["bqkv"], w["cqkv"], self.cache_k,
            self.cache_v,
            w["wo"], w["bo"], w["wfc"], w["bfc"], w["cfc"], w["wpr"], w["bpr"], w["wlm"], w["blm"], w["clm"],
            self.x, self.x1, self.stats, self.q, self.o, self.h, self.acc, self.tile_counts, self.po, self.pm, self.pl,
            self.logits, self.counters, self.error,
            self.times if self.times is not None else self.counters,
            self.batch, layer_lo, layer_hi, self.vocab, self.max_len, self.eps, self.scale * math.log2(math.e),
            self.s_max,
            D=self.d, HIDDEN=self.hidden, NH=self.nH, NKV=self.nKV, HPG=self.nH // self.nKV, DK=self.dk, DV=self.dv,
            N_QKV=w["wqkv"].size(1), SHARED_KV=self.shared, ROPE=self.rope, NORM=self.norm_kind, BLOCK_M=self.block_m,
            BLOCK_D=_pow2(self.d, 16), BN=BN, BK=BK, BN_LM=BN_LM, SPLIT_D=SPLIT_D, SPLIT_F=SPLIT_F,
            BLOCK_H=self.block_h,
            BLOCK_N=self.block_n, BLOCK_SM=_pow2(self.s_max * self.groups, 1),
            MIN_CHUNK=max(dm.MIN_CHUNK, self.block_n), GROUPS=self.groups, MERGE_HEADS=self.merge_heads,
            DOT_PREC="ieee" if self.dtype == torch.float32 else "tf32", ONLY=only, FIRST=first, FINAL=final,
            MAX_SPIN=dm.MAX_SPIN, TIMING=self.times is not None and only == 0, num_warps=NUM_WARPS,
            num_stages=STAGES, **({"maxnreg": MAXNREG} if MAXNREG else {}))

    def _run(self, w: dict, idx, pos, phased: bool) -> None:
        """The step's launches: one, or (phased) the embeddings', a launch per phase and layer, then the final norm
        and LM head's."""
        if phased:
            self._launch(w, idx, pos, ONLY_EMBED, 0, 0, True, False)
            for layer in range(self.n_layer):
                for only in PHASES:
                    self._launch(w, idx, pos, only, layer, layer + 1, False, False)
            self._launch(w, idx, pos, ONLY_LM, self.n_layer, self.n_layer, False, True)
        else:
            self._launch(w, idx, pos, 0, 0, self.n_layer, True, True)

    def _stamp_slots(self) -> int:
        """timed_step's slots a program: 0 the start, 1 the barrier after the embeddings, 2 + 6 l + i the barrier
        after layer l's phase i (A, B1, B2, D, E, F), 6 L + 2 the end."""
        return 6 * self.n_layer + 3

"""
The whole decode step of a GPT in ONE persistent Triton kernel: the launches of a batch-1 step become grid barriers.

A batch-1 decode step of GPT-2 124M is bound by its chain of dependent kernels, not by its bytes: 77 launches of
2.5-4 us each inside a CUDA graph (decode_linear + decode_attention, ~0.27 ms on an H200) for 0.05-0.09 ms of weight
and cache reads (results/bench/LOG.md). Here one launch of two programs per SM runs every layer's phases in turn,

    A   x0 = the embeddings, or the last layer's x1 + its MLP output; norm1; [q | k | v] = norm(x0) W_qkv^T + b,
        the new k, v written into the cache at `pos`
    B1  attention of the new token to rows 0 .. pos, split over programs: each split's partial output, row max and
        row sum for the query heads of its KV head
    B2D a program per (sequence, query head, chunk of outputs): the head's partials merged (one load of them all),
        o_h W_O[:, head]^T for its outputs added (fp32 atomics) into the attention's output
    E   x1 = x0 + attention output (+ b_O); h = gelu(norm2(x1) W_fc^T + b_fc)
    F   h W_proj^T (the next phase adds it and b_proj to x1)
        (FUSED_MLP, the default: E and F one phase, a program per tile of hidden units taking it through GELU and
        its rows of W_proj^T, the products' sums fp32 atomic adds: 4 barriers a layer)
    and at the end x2 = x1 + MLP output, the final norm and the LM head,

with a grid barrier between phases (5 a layer, 4 with FUSED_MLP: a counter in global memory that every program
increments and one thread of each polls; Hopper's 264 programs are all resident, two per SM, so nobody waits for a
program that never starts). The output projection is split over its K (the heads), so the merge and the
projection are one phase; its sums (and the fused MLP's) are fp32 atomic adds, in the order the programs arrive:
the step's logits vary run to run in their last bits (the model's default path is deterministic). Each program
takes every `nprog`-th tile of a phase's output columns (or of the attention's splits). The attention of every
variant whose decode form is "queries, one or more shared K/V heads, an output matrix" runs here: MHA, GQA,
MQA (GroupedQueryAttention), Tucker (its merged form [U2 G_q | U3 | U~3] and G_o U~2^T: one latent K/V head, or
one shared latent with shared_kv) and MLA (absorbed and merged: [q_i W_UK,i^T for every head | c_K (| c_V)] and
W_UV W_O, the same shape), with learned positions or RoPE, the keys cached as the model's step caches them: rotated
(MHA, GQA, MQA, Tucker with separate K and V: q and the new key rotated in phase A, each rotated head's weight rows
interleaved so that a tile holds whole pairs of dims, _store_qkv) or unrotated (a shared latent, which is the value
too, and MLA's latent RoPE: q rotated in phase A, the keys as B1 reads them, _attention_splits; at least 32 wide).
Not served (`unsupported` says why; model.StaticDecoder keeps its kernels): MLA's decoupled RoPE, SwiGLU, more than
decode_wide.MAX_ROWS sequences, autocast, mixed dtypes.

The arithmetic follows the unfused model's rounding points (each op's result rounded to the activations' dtype, as
decode_linear does), in another summation order: tested against GPT.decode_step to float32 rounding, in Triton's
interpreter on the CPU, where the phases run as separate launches (`ONLY`), since the interpreter runs programs
one after another and a barrier would wait forever; on the GPU the same phases run behind the barriers (CUDA test:
one launch against the phase-by-phase launches and the model). A barrier that waits more than MAX_SPIN polls sets
`error` and lets the step finish (garbage, but no hang): `MegaDecoder.check()` raises on it.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from decode_attention import (DTYPES, _cdiv, _interpret, _pow2, _pow2_floor, _triton_available,
                              kernel_unavailable)
from decode_linear import NORM_KINDS, _norm_params

MAX_ROWS = 4  # sequences a step serves (the GEMV tiles broadcast over rows in registers)
MAX_DIM = 8192  # n_embd: a whole row of x is one register tile
TILE = 32768  # elements (rows x columns x K) of a layer's GEMV tile: GPT-2's phases take one tile a program
#              (3-4 rows: 4-row tiles of half the columns, the MLP's 8 hidden units; session 55, H200, Tucker [8,64,64]
#              at 3 / 4 rows: 0.3764 / 0.4070 ms, TILE 65536 0.4104 / 0.4575, 131072 0.4111 / 0.4554: larger tiles
#              spill, 256-296 B of stack at sm_90)
TILE_LM = 16384  # the LM head's tiles (many a program: two tiles' weights in registers, the next one's in flight;
#                 session 55: 32768, 8 columns at 3-4 rows as at 2, left the step level)
NUM_WARPS = 4
PROGRAMS_PER_SM = 2  # two programs of 4 warps an SM: one's chain of round trips overlaps the other's (session 17:
#                      -12% against one program of 8 warps). Every program must be resident at once (the barriers
#                      wait for all): PROGRAMS_PER_SM x NUM_WARPS <= 8 (8 warps of up to 255 registers fill an SM)
MAX_SPLITS = 128  # attention splits per (sequence, KV head), at most (phase B2D merges them, one load per head)
MIN_CHUNK = 64  # cache rows a split reads, at least
BLOCK_N = 64  # cache rows per step of a split's loop; half of it where keys are rotated as read (a shared latent with
#               RoPE, MLA's latent RoPE: the rotated halves beside the read ones; H200, Tucker shared with RoPE at
#               batch 1, 4k / 16k: 32 rows 0.2091 / 0.2436 ms against 0.2179 / 0.2504 at 64 (session 26 call 2), 0.2084 / 0.2456
#               against 0.2133-0.2166 / 0.2417-0.2498 (call 3))
FUSED_MLP = True  # phases E and F as one (each program's hidden units through GELU, then their share of W_proj, its
#                  sums added into the MLP's output by fp32 atomics): 4 barriers a layer, not 5
#                  (bench_decode --knob decode_mega.FUSED_MLP=False: the two phases, F over all of the hidden row)
MLP_PROJ_AHEAD = None  # FUSED_MLP: a tile's W_proj^T rows loaded at the phase's start, before its h is computed (in
#                       flight meanwhile) instead of after its GELU. None: where phase A's tile is at most PROJ_ROOM
#                       elements (rows x columns x K), its registers leaving room for both MLP tiles (GPT-2 at batch 1:
#                       MQA and Tucker, 255 registers, no spills; MHA, GQA-4 spill; session 20: Tucker at 4k 0.2073 /
#                       0.2049 -> 0.1971 / 0.1969 ms, MHA's one-launch step 0.28 -> 0.33 forced on)
PROJ_ROOM = 4096  # MLP_PROJ_AHEAD=None: phase A's tile (rows x columns x K elements) at most this leaves the registers
#                   for W_proj^T's tile at the MLP's start (GPT-2 at batch 1: 1 x 4 x 1024 for MQA and Tucker)
MLP_UNITS = 0  # hidden units an MLP tile, fused or E's (a power of two; 0: one tile a program where the registers
#               allow it, GPT-2 at batch 1: 16 units, 192 tiles for 264 programs, each output of the fused MLP summed
#               by 192 atomic adds)
VEC_AHEAD = True  # a phase's small vectors (its norm's weight and bias, its biases) loaded with its weight tile during
#                  the barrier before it (False: where they are used, after the barrier: in the phase's chain of
#                  dependent round trips, two or three of them from DRAM)
MLP_COPIES = 4  # FUSED_MLP: copies of the MLP's fp32 sum the programs' atomic adds spread over (program p adds into
#                copy p % MLP_COPIES; the next phase sums the copies as it reads): GPT-2's 192 tiles add into each of
#                the 768 sums, 48 into each copy's (session 20, against 1: Tucker at batch 1 and 4k -0.5%, Tucker
#                shared -1%, MHA -2 to -3%)
PRODUCT_2D = True  # the GEMV tiles' products a row of activations at a time, in the layout the weights are loaded in
#                   (False: one 3D product, for which Triton moves every weight tile through shared memory and
#                   evaluates GELU's erf 16 times a thread; session 20: Tucker at batch 1 and 4k 0.228 -> 0.208 ms)
EARLY_ARRIVE = True  # a program arrives at a barrier before it loads the next phase's weights (False: after, in the
#                     release's fence, which waits for them; bench_decode --knob decode_mega.EARLY_ARRIVE=False)
MAX_SPIN = 1 << 20  # polls of a barrier before it gives up and flags the step as failed
INTERPRET_PROGRAMS = 3  # programs in Triton's interpreter (several: the tile striding is exercised)
PHASE_LAUNCHES = {False: (1, 2, 3, 4, 5), True: (1, 2, 3, 4)}  # a layer's launches (ONLY) phase by phase, by
#                                                              FUSED_MLP (fused: E's launch runs the whole MLP)


if _triton_available():
    import triton
    import triton.language as tl

    from decode_linear import _gelu_erf, _matvec, _row_of, _scale_shift, _with_row

    @triton.jit
    def _stamp(AT, TIMING: tl.constexpr):
        """TIMING: the GPU's global nanosecond timer and this SM's cycle counter into AT[0], AT[1] (one thread's
        reading; MegaDecoder.timed_step reads them back)."""
        if TIMING:
            zero = tl.full([], 0, tl.int32)
            ns = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [zero], dtype=tl.int64,
                                           is_pure=False, pack=1)
            cycles = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [zero], dtype=tl.int64,
                                               is_pure=False, pack=1)
            tl.store(AT, ns)
            tl.store(AT + 1, cycles)

    @triton.jit
    def _stamp_sm(AT, TIMING: tl.constexpr):
        """TIMING: the SM this program runs on (%smid) into AT[0] (MegaDecoder.timed_step: the start slot's third
        column)."""
        if TIMING:
            zero = tl.full([], 0, tl.int32)
            sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [zero], dtype=tl.int32, is_pure=False,
                                           pack=1)
            tl.store(AT, sm.to(tl.int64))

    @triton.jit
    def _grid_arrive(SYNC, AT, TIMING: tl.constexpr):
        """This program's arrival at a grid barrier (returns the count it saw, its own included): every thread's
        stores before it are visible to every program that has seen the count complete. One thread touches the
        counter (Triton runs a scalar atomic in one thread and hands its result to the others). The release is a
        fence (MEMBAR) that waits for that thread's outstanding memory operations: loads issued just before it
        delay the arrival, so the next phase's weights are loaded between _grid_arrive and _grid_wait."""
        tl.debug_barrier()  # every thread's stores issued before the (one-thread) release below
        _stamp(AT, TIMING)  # the arrival (AT: this barrier's 4 stamps)
        return tl.atomic_add(SYNC, 1, sem="release", scope="gpu") + 1

    @triton.jit
    def _grid_wait(SYNC, seen, target, ERR, AT, MAX_SPIN: tl.constexpr, TIMING: tl.constexpr):
        """Wait until the counter SYNC reaches `target` (every program's arrival at this barrier): the others'
        stores before their arrivals happen before what follows. One thread polls: 132 programs x 256 threads
        polling one L2 line made each barrier cost microseconds."""
        spins = 0
        while (seen < target) & (spins < MAX_SPIN):
            # a compare-and-swap that never swaps (the count is never -1) reads the counter with acquire semantics
            # (an atomic add of 0 is folded away by Triton)
            seen = tl.atomic_cas(SYNC, -1, -1, sem="acquire", scope="gpu")
            spins += 1
        if seen < target:
            tl.atomic_or(ERR, 1)
        tl.debug_barrier()
        _stamp(AT + 2, TIMING)  # the release

    @triton.jit
    def _grid_sync(SYNC, target, ERR, AT, MAX_SPIN: tl.constexpr, TIMING: tl.constexpr):
        """A grid barrier: _grid_arrive, then _grid_wait."""
        _grid_wait(SYNC, _grid_arrive(SYNC, AT, TIMING), target, ERR, AT, MAX_SPIN, TIMING)

    @triton.jit
    def _barrier_open(SYNC, AT, TIMING: tl.constexpr, EARLY_ARRIVE: tl.constexpr):
        """The first half of a grid barrier during which this program loads the next phase's weights (issued between
        _barrier_open and _barrier_close): EARLY_ARRIVE, the arrival (the loads are then in flight while the program
        polls); else nothing (the loads come first, which the release's fence then waits for). Returns the count seen
        (0 without the arrival)."""
        seen = tl.zeros([], tl.int32)
        if EARLY_ARRIVE:
            seen = _grid_arrive(SYNC, AT, TIMING)
        return seen

    @triton.jit
    def _barrier_close(SYNC, seen, target, ERR, AT, MAX_SPIN: tl.constexpr, TIMING: tl.constexpr,
                       EARLY_ARRIVE: tl.constexpr):
        """The second half: the arrival (without EARLY_ARRIVE), then the wait for every program's."""
        if not EARLY_ARRIVE:
            seen = _grid_arrive(SYNC, AT, TIMING)
        _grid_wait(SYNC, seen, target, ERR, AT, MAX_SPIN, TIMING)

    @triton.jit
    def _barrier_tile(SYNC, target, ERR, AT, W, t, N, BN: tl.constexpr, K: tl.constexpr, BLOCK_K: tl.constexpr,
                      MAX_SPIN: tl.constexpr, TIMING: tl.constexpr, EARLY_ARRIVE: tl.constexpr):
        """A grid barrier during which this program loads the next phase's weight tile (_weight_tile's rows t*BN ..
        of W), returned."""
        seen = _barrier_open(SYNC, AT, TIMING, EARLY_ARRIVE)
        w = _weight_tile(W, t, N, BN, K, BLOCK_K)
        _barrier_close(SYNC, seen, target, ERR, AT, MAX_SPIN, TIMING, EARLY_ARRIVE)
        return w

    @triton.jit
    def _vec(V, rk, ok, AHEAD: tl.constexpr):
        """A small vector (a norm's weight or bias, a bias) at V + rk: loaded now (AHEAD, in a barrier's window), or
        its pointers, for _at to load where it is used."""
        if AHEAD:
            v = tl.load(V + rk, mask=ok, other=0.0)
        else:
            v = V + rk
        return v

    @triton.jit
    def _tile_vec(V, t, BN: tl.constexpr, N, AHEAD: tl.constexpr):
        """_vec of a tile's entries t*BN .. t*BN + BN - 1 of the vector V (N,) (a GEMV tile's bias)."""
        rn = t * BN + tl.arange(0, BN)
        return _vec(V, rn, rn < N, AHEAD)

    @triton.jit
    def _norm_vecs(NW, NB, rk, k_ok, HAS_NB: tl.constexpr, AHEAD: tl.constexpr):
        """_vec of a norm's weight and bias (the weight's again without HAS_NB: unused)."""
        nw = _vec(NW, rk, k_ok, AHEAD)
        nb = nw
        if HAS_NB:
            nb = _vec(NB, rk, k_ok, AHEAD)
        return nw, nb

    @triton.jit
    def _at(v, ok, AHEAD: tl.constexpr):
        """_vec's vector as fp32 (loaded here unless AHEAD)."""
        if AHEAD:
            out = v.to(tl.float32)
        else:
            out = tl.load(v, mask=ok, other=0.0).to(tl.float32)
        return out

    @triton.jit
    def _norm_rows(x, k_ok, nw, nb, d, eps, NORM: tl.constexpr, HAS_NB: tl.constexpr, AHEAD: tl.constexpr):
        """LayerNorm (NORM 1) or RMSNorm (2) of the fp32 rows x (BLOCK_M, BLOCK_D), zero outside the d columns; nw,
        nb its weight and bias (_vec's; nb unused without HAS_NB): decode_linear's formula."""
        if NORM == 2:
            mean = tl.zeros([x.shape[0]], tl.float32)
            rstd = tl.rsqrt(tl.sum(x * x, axis=1) / d + eps)
        else:
            mean = tl.sum(x, axis=1) / d
            c = tl.where(k_ok[None, :], x - mean[:, None], 0.0)
            rstd = tl.rsqrt(tl.sum(c * c, axis=1) / d + eps)
        nwf = _at(nw, k_ok, AHEAD)
        nbf = nwf
        if HAS_NB:
            nbf = _at(nb, k_ok, AHEAD)
        return _scale_shift(x, mean, rstd, nwf, nbf, k_ok, NORM, HAS_NB)

    @triton.jit
    def _load_rows(X, rm, m_ok, rk, k_ok, d):
        """Rows of a buffer other programs wrote in this launch, fp32: through L2 (.cg), never a stale L1 line."""
        return tl.load(X + rm[:, None] * d + rk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0,
                       cache_modifier=".cg").to(tl.float32)

    @triton.jit
    def _weight_tile(W, t, N, BN: tl.constexpr, K: tl.constexpr, BLOCK_K: tl.constexpr):
        """Rows t*BN .. t*BN + BN - 1 of the weight W (N, K), all of K (zero outside N and K): one tile's loads, all
        issued at once (a tile past N loads nothing)."""
        rb = tl.arange(0, BN)
        rk = tl.arange(0, BLOCK_K)
        base = W + (t * BN + tl.zeros([], tl.int64)) * K  # the tile's first row; 32-bit offsets from it (BN x K < 2^31)
        return tl.load(base + rb[:, None] * K + rk[None, :], mask=(t * BN + rb < N)[:, None] & (rk < K)[None, :],
                       other=0.0)

    @triton.jit
    def _vecmat(h, v, TWO_D: tl.constexpr):
        """h (BLOCK_M, BN) fp32 rows times v (BN, K): (BLOCK_M, K) fp32 (TWO_D as _matvec's: the sum over v's rows
        then stays within each thread)."""
        vf = v.to(tl.float32)
        if TWO_D:
            out = tl.zeros([h.shape[0], v.shape[1]], tl.float32)
            for i in tl.static_range(h.shape[0]):
                out = _with_row(out, i, tl.sum(_row_of(h, i)[:, None] * vf, axis=0))
        else:
            out = tl.sum(h[:, :, None] * vf[None, :, :], axis=1)
        return out

    @triton.jit
    def _turn(x1, x2, c, s, dt):
        """RoPE's rotate-half pairs (x1, x2) turned by angles of cosines c and sines s (in dt: model.apply_rope rounds
        its tables so), each product and sum rounded to dt as model.apply_rope rounds them: (r1, r2) in dt."""
        x1 = x1.to(tl.float32)
        x2 = x2.to(tl.float32)
        c = c.to(tl.float32)
        s = s.to(tl.float32)
        r1 = ((x1 * c).to(dt).to(tl.float32) - (x2 * s).to(dt).to(tl.float32)).to(dt)
        r2 = ((x1 * s).to(dt).to(tl.float32) + (x2 * c).to(dt).to(tl.float32)).to(dt)
        return r1, r2

    @triton.jit
    def _table_angles(COS, SIN, at, ok, dt):
        """The cosines and sines at offsets `at` of the (positions, Dk/2) tables COS, SIN, rounded to dt as
        model.apply_rope rounds them (where not ok, the angle 0; ok None: every offset read)."""
        if ok is None:
            c = tl.load(COS + at)
            s = tl.load(SIN + at)
        else:
            c = tl.load(COS + at, mask=ok, other=1.0)
            s = tl.load(SIN + at, mask=ok, other=0.0)
        return c.to(dt), s.to(dt)

    @triton.jit
    def _rotate_pairs(x1, x2, COS, SIN, at, ok, dt):
        """_turn by the angles at offsets `at` of the tables (where ok; elsewhere left as they are). Phase A's q and
        new keys (_store_qkv)."""
        c, s = _table_angles(COS, SIN, at, ok, dt)
        return _turn(x1, x2, c, s, dt)

    @triton.jit
    def _query_halves(Q, bg, NH: tl.constexpr, NKV: tl.constexpr, HPG: tl.constexpr, DK: tl.constexpr,
                      BLOCK_H: tl.constexpr):
        """The query heads of (sequence, KV head) bg as their two halves, dims 0 .. DK/2 - 1 and DK/2 .. DK - 1 (RoPE's
        pairs): (BLOCK_H, DK/2) each, rows past the group's heads zero."""
        HALF: tl.constexpr = DK // 2
        hh = tl.arange(0, BLOCK_H)
        at = (bg // NKV) * (NH * DK) + ((bg % NKV) * HPG + hh)[:, None] * DK + tl.arange(0, HALF)[None, :]
        ok = (hh < HPG)[:, None]
        q_lo = tl.load(Q + at, mask=ok, other=0.0, cache_modifier=".cg")
        q_hi = tl.load(Q + at + HALF, mask=ok, other=0.0, cache_modifier=".cg")
        return q_lo, q_hi

    @triton.jit
    def _query_at_base(q_lo, q_hi, COS, SIN, n0, dt):
        """Keys cached unrotated (ROPE 2), a step of rows n0, n0 + 1, ...: rotations compose, R(n0 + j) = R(n0) R(j),
        so q.R(n0 + j)k = (R(n0)^T q).(R(j) k). The queries' halves turned back by R(n0) (fp32, rounded to dt), the
        keys then need the angles of table rows j < BLOCK_N only, the same rows every step (L1, not each row's own
        table row through L2: fp32 tables are twice a 64-wide bf16 key row's bytes)."""
        HALF: tl.constexpr = q_lo.shape[1]
        eh = tl.arange(0, HALF)
        c0 = tl.load(COS + n0 * HALF + eh)[None, :]
        s0 = tl.load(SIN + n0 * HALF + eh)[None, :]
        lo = q_lo.to(tl.float32)
        hi = q_hi.to(tl.float32)
        return (lo * c0 + hi * s0).to(dt), (hi * c0 - lo * s0).to(dt)

    @triton.jit
    def _store_qkv(y, rn, rm, ok, Q, KC, VC, B, layer64, pos, max_len, NH: tl.constexpr, NKV: tl.constexpr,
                   DK: tl.constexpr, DV: tl.constexpr, SHARED_KV: tl.constexpr, COS, SIN, ROPE: tl.constexpr):
        """Columns rn of [q | k | v] for rows rm (y (rows, columns) in the activations' dtype, ok its mask): q into Q
        (B, NH DK), k and v into the stacked caches (L, B, NKV, max_len, D) at row `pos`. ROPE: each q and k head's
        columns come interleaved, dims (i, i + DK/2) side by side (the stacked weights' rows permuted so: a tile of
        an even number of columns holds whole pairs); each pair is rotated by the angles of position `pos` (COS,
        SIN (positions, DK/2) tables, rounded to y's dtype as model.apply_rope rounds them) and stored at its
        own dims, as the model's step stores q and its cached keys. ROPE 1: q and k so (keys cached rotated); 2: q
        only (keys cached unrotated, rotated as B1 reads them: _attention_splits)."""
        NROT: tl.constexpr = (NH + (NKV if ROPE == 1 else 0)) * DK  # the rotated heads' columns: q's (and k's)
        if ROPE:
            BM: tl.constexpr = y.shape[0]
            BNP: tl.constexpr = y.shape[1] // 2  # pairs in the tile
            dt = y.dtype
            even, _ = tl.split(tl.reshape(rn, (BNP, 2)))  # (pairs,) each pair's first column
            rot = even < NROT  # q's (and k's) pairs; the other columns stay as they are
            p = (even % DK) // 2  # the pair's index in its head: dims p and p + DK/2
            x1, x2 = tl.split(tl.reshape(y, (BM, BNP, 2)))  # (rows, pairs) each
            r1, r2 = _rotate_pairs(x1, x2, COS, SIN, (pos * (DK // 2) + p)[None, :], rot[None, :], dt)
            y = tl.reshape(tl.join(r1, r2), (BM, 2 * BNP))
            j = rn % DK  # 2 p + s in the interleaved head: stored at dim p + s DK/2
            rn = tl.where(rn < NROT, rn - j + j // 2 + (j % 2) * (DK // 2), rn)
        is_q = rn < NH * DK
        tl.store(Q + rm[:, None] * (NH * DK) + rn[None, :], y, mask=ok & is_q[None, :])
        ck = tl.maximum(rn - NH * DK, 0)
        is_k = (rn >= NH * DK) & (ck < NKV * DK)
        row = (layer64 * B + rm[:, None]) * NKV + (ck // DK)[None, :]  # (rows, columns): its cache row
        tl.store(KC + row * max_len * DK + pos * DK + (ck % DK)[None, :], y, mask=ok & is_k[None, :])
        if not SHARED_KV:
            cv = tl.maximum(rn - NH * DK - NKV * DK, 0)
            is_v = rn >= NH * DK + NKV * DK
            row = (layer64 * B + rm[:, None]) * NKV + (cv // DV)[None, :]
            tl.store(VC + row * max_len * DV + pos * DV + (cv % DV)[None, :], y, mask=ok & is_v[None, :])

    @triton.jit
    def _gemv_phase(a, w, W, N, pid, nprog, Bias, bias0, OUT, KC, VC, COS, SIN, rm, m_ok, B, layer64, pos, max_len,
                    dt, BN: tl.constexpr, K: tl.constexpr, BLOCK_K: tl.constexpr, EPI: tl.constexpr,
                    ONE: tl.constexpr, NH: tl.constexpr, NKV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                    SHARED_KV: tl.constexpr, ROPE: tl.constexpr, AHEAD: tl.constexpr, TWO_D: tl.constexpr):
        """out = a (BLOCK_M, BLOCK_K) fp32 rows times W (N, K)^T (+ Bias), the program's tiles pid, pid + nprog, ...:
        w holds the first one's weights (loaded before the barrier that precedes this phase), the next tile's loads
        are issued before each tile's arithmetic (ONE: a tile a program at most, no second tile's registers; its
        bias is bias0, _vec's of the tile's columns, else each tile's is loaded from Bias). The epilogue EPI: 0
        [q | k | v] (q into OUT, k and v into the caches at `pos`; _store_qkv, rotated with ROPE), 1 the fp32 sum
        into OUT (without the bias), 2 GELU into OUT, 3 logits into OUT."""
        for t in range(pid, tl.cdiv(N, BN) if not ONE else tl.minimum(pid + 1, tl.cdiv(N, BN)), nprog):
            if not ONE:
                w_next = _weight_tile(W, t + nprog, N, BN, K, BLOCK_K)
            rn = t * BN + tl.arange(0, BN)
            n_ok = rn < N
            y = _matvec(a, w, TWO_D)  # (BLOCK_M, BN)
            if (EPI == 0) | (EPI == 2):
                if ONE:
                    y += _at(bias0, n_ok, AHEAD)[None, :]
                else:
                    y += tl.load(Bias + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
            ok = m_ok[:, None] & n_ok[None, :]
            if EPI == 0:
                _store_qkv(y.to(dt), rn, rm, ok, OUT, KC, VC, B, layer64, pos, max_len, NH, NKV, DK, DV, SHARED_KV,
                           COS, SIN, ROPE)
            elif EPI == 1:  # the fp32 sum (no bias), for the next phase to add to the stream
                tl.store(OUT + rm[:, None] * N + rn[None, :], y, mask=ok)
            elif EPI == 2:  # F.gelu (exact) of the linear's stored output
                y = y.to(dt).to(tl.float32)
                y = _gelu_erf(y)
                tl.store(OUT + rm[:, None] * N + rn[None, :], y.to(dt), mask=ok)
            else:
                tl.store(OUT + rm[:, None] * N + rn[None, :], y.to(dt), mask=ok)
            if not ONE:
                w = w_next

    @triton.jit
    def _mlp_phase(a, w, v, WFC, WPRT, N, pid, nprog, Bias, bias0, ACC, rm, m_ok, rk, k_ok, B, D, dt,
                   BN: tl.constexpr, BLOCK_K: tl.constexpr, ONE: tl.constexpr, PROJ_AHEAD: tl.constexpr,
                   AHEAD: tl.constexpr, COPIES: tl.constexpr, TWO_D: tl.constexpr):
        """The MLP of the fp32 rows a (BLOCK_M, BLOCK_K) over the program's tiles of hidden units t = pid, pid + nprog,
        ...: h = gelu(a W_fc[t]^T + b_fc[t]), rounded as the unfused ops store it, then h W_proj[:, t]^T (rows t of
        W_proj^T, v) added into ACC (fp32 atomics: the sum over every program's hidden units, without b_proj). w
        holds the first tile's W_fc rows, v its W_proj^T rows with PROJ_AHEAD (else a tile's v is loaded after its
        h: fewer registers live, its round trip exposed); the next tile's are issued before each tile's arithmetic
        (not ONE). bias0: _vec's of the first tile's b_fc (ONE), else each tile's is loaded from Bias."""
        for t in range(pid, tl.cdiv(N, BN) if not ONE else tl.minimum(pid + 1, tl.cdiv(N, BN)), nprog):
            if not ONE:
                w_next = _weight_tile(WFC, t + nprog, N, BN, D, BLOCK_K)
                if PROJ_AHEAD:
                    v_next = _weight_tile(WPRT, t + nprog, N, BN, D, BLOCK_K)
            rn = t * BN + tl.arange(0, BN)
            y = _matvec(a, w, TWO_D)  # (BLOCK_M, BN)
            if ONE:
                y += _at(bias0, rn < N, AHEAD)[None, :]
            else:
                y += tl.load(Bias + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
            y = y.to(dt).to(tl.float32)
            y = _gelu_erf(y).to(dt).to(tl.float32)  # F.gelu, stored h
            if not PROJ_AHEAD:
                v = _weight_tile(WPRT, t, N, BN, D, BLOCK_K)
            out = _vecmat(y, v, TWO_D)  # (BLOCK_M, BLOCK_K): h_t W_proj[:, t]^T
            tl.atomic_add(ACC + (pid % COPIES) * B * D + rm[:, None] * D + rk[None, :], out,
                          mask=m_ok[:, None] & k_ok[None, :], sem="relaxed", scope="gpu")
            if not ONE:
                w = w_next
                if PROJ_AHEAD:
                    v = v_next

    @triton.jit
    def _out_tile(WO, layer64, item, NH: tl.constexpr, NCH: tl.constexpr, D: tl.constexpr, KO: tl.constexpr,
                  DV: tl.constexpr, BN_OD: tl.constexpr):
        """W_O's columns of query head h, rows of output chunk c ((b, h, c) = item): (BN_OD, DV)."""
        h = (item // NCH) % NH
        rn = ((item % NCH) * BN_OD + tl.arange(0, BN_OD)).to(tl.int64)
        ev = tl.arange(0, DV)
        return tl.load(WO + layer64 * D * KO + rn[:, None] * KO + h * DV + ev[None, :], mask=(rn < D)[:, None],
                       other=0.0)

    @triton.jit
    def _stream_rows(X, ACC, bias, rm, m_ok, rk, k_ok, B, D: tl.constexpr, dt, AHEAD: tl.constexpr,
                     COPIES: tl.constexpr):
        """x + (acc + bias), the sublayer's output (its sum over programs, fp32, in COPIES copies of (B, D) summed
        here) rounded as the unfused ops store it, then the sum rounded: the residual stream after a sublayer, every
        row, fp32 (bias: _vec's)."""
        acc = _load_rows(ACC, rm, m_ok, rk, k_ok, D)
        for c in tl.static_range(1, COPIES):
            acc += _load_rows(ACC + c * B * D, rm, m_ok, rk, k_ok, D)
        y = acc + _at(bias, k_ok, AHEAD)[None, :]
        return (y.to(dt).to(tl.float32) + _load_rows(X, rm, m_ok, rk, k_ok, D)).to(dt).to(tl.float32)

    @triton.jit
    def _split_item(Q, KC, VC, item, B, layer64, max_len, length, chunk, n_split, NH: tl.constexpr,
                    NKV: tl.constexpr, HPG: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BLOCK_H: tl.constexpr):
        """B1's item (sequence, KV head, split) `item`: (bg = sequence x NKV + KV head, split s, the group's queries
        q (BLOCK_H, DK) from Q, its key and value cache rows' base pointers, the split's first row and its end)."""
        hh = tl.arange(0, BLOCK_H)
        ek = tl.arange(0, DK)
        bg = item // n_split  # (sequence, KV head) = b * NKV + g
        s = item % n_split
        b = bg // NKV
        g = bg % NKV
        heads = g * HPG + hh
        q = tl.load(Q + b * (NH * DK) + heads[:, None] * DK + ek[None, :], mask=(hh < HPG)[:, None],
                    other=0.0, cache_modifier=".cg")  # (BLOCK_H, DK)
        k_base = KC + ((layer64 * B + b) * NKV + g) * max_len * DK
        v_base = VC + ((layer64 * B + b) * NKV + g) * max_len * DV
        start = s * chunk
        return bg, s, q, k_base, v_base, start, tl.minimum(start + chunk, length)

    @triton.jit
    def _attention_splits(Q, KC, VC, PO, PM, PL, COS, SIN, pid, nprog, B, layer64, max_len, length, chunk, n_split,
                          s_max, qk_scale, NH: tl.constexpr, NKV: tl.constexpr, HPG: tl.constexpr, DK: tl.constexpr,
                          DV: tl.constexpr, SHARED_KV: tl.constexpr, ROPE: tl.constexpr, BLOCK_H: tl.constexpr,
                          BLOCK_N: tl.constexpr, DOT_PREC: tl.constexpr):
        """Phase B1: the program's items (sequence, KV head, split) pid, pid + nprog, ...: the attention of the query
        heads of the KV head (q from Q) to the split's `chunk` cache rows (rows 0 .. length - 1 split in n_split), its
        partial (unnormalized output, row max, row sum; exp2 of scores scaled by qk_scale) into PO, PM, PL at
        ((sequence x NKV + head) x s_max + split) x BLOCK_H + the head's index in its group. ROPE 2: the keys are
        cached unrotated and rotated here as read, in halves (dims i and i + DK/2: RoPE's pairs, no exchange of
        elements between threads), a step's rows by R(j) with the queries turned back by R(n0) (_query_at_base); a
        shared latent's value is the unrotated halves (its output in halves)."""
        HALF: tl.constexpr = DK // 2
        hh = tl.arange(0, BLOCK_H)
        ev = tl.arange(0, DV)
        ek = tl.arange(0, DK)
        eh = tl.arange(0, HALF)
        jj = tl.arange(0, BLOCK_N)
        dt = KC.dtype.element_ty
        V_HALVES: tl.constexpr = (ROPE == 2) & SHARED_KV  # the value is the unrotated latent: its halves
        for item in range(pid, B * NKV * n_split, nprog):
            bg, s, q, k_base, v_base, start, end = _split_item(Q, KC, VC, item, B, layer64, max_len, length, chunk,
                                                               n_split, NH, NKV, HPG, DK, DV, BLOCK_H)
            m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
            l_i = tl.zeros([BLOCK_H], tl.float32)
            acc = tl.zeros([BLOCK_H, DV], tl.float32)
            if ROPE == 2:
                q_lo, q_hi = _query_halves(Q, bg, NH, NKV, HPG, DK, BLOCK_H)  # (BLOCK_H, HALF) each
                if V_HALVES:  # a shared latent's output in halves
                    acc_lo = tl.zeros([BLOCK_H, HALF], tl.float32)
                    acc_hi = tl.zeros([BLOCK_H, HALF], tl.float32)
            for n0 in range(start, end, BLOCK_N):
                rows = n0 + jj
                r_ok = rows < end
                if ROPE == 2:
                    qb_lo, qb_hi = _query_at_base(q_lo, q_hi, COS, SIN, n0, dt)
                    c, sn = _table_angles(COS, SIN, jj[:, None] * HALF + eh[None, :], r_ok[:, None], dt)
                    k_at = k_base + rows[:, None] * DK + eh[None, :]
                    k_lo = tl.load(k_at, mask=r_ok[:, None], other=0.0, cache_modifier=".cg")  # (BLOCK_N, HALF)
                    k_hi = tl.load(k_at + HALF, mask=r_ok[:, None], other=0.0, cache_modifier=".cg")
                    kr_lo, kr_hi = _turn(k_lo, k_hi, c, sn, dt)  # rows j of the step turned by R(j)
                    qk = tl.dot(qb_lo, tl.trans(kr_lo), input_precision=DOT_PREC)  # (BLOCK_H, BLOCK_N)
                    qk += tl.dot(qb_hi, tl.trans(kr_hi), input_precision=DOT_PREC)
                else:
                    k = tl.load(k_base + rows[:, None] * DK + ek[None, :], mask=r_ok[:, None], other=0.0,
                                cache_modifier=".cg")  # (BLOCK_N, DK); row pos was written in phase A
                    qk = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)  # (BLOCK_H, BLOCK_N)
                qk = tl.where(r_ok[None, :], qk * qk_scale, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(qk, axis=1))
                alpha = tl.exp2(m_i - m_new)
                p = tl.exp2(qk - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, axis=1)
                m_i = m_new
                if V_HALVES:
                    acc_lo = acc_lo * alpha[:, None] + tl.dot(p.to(dt), k_lo, input_precision=DOT_PREC)
                    acc_hi = acc_hi * alpha[:, None] + tl.dot(p.to(dt), k_hi, input_precision=DOT_PREC)
                else:
                    if SHARED_KV:  # the latent is key and value: one read
                        v = k
                    else:
                        v = tl.load(v_base + rows[:, None] * DV + ev[None, :], mask=r_ok[:, None], other=0.0,
                                    cache_modifier=".cg")
                    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PREC)
            slot = (bg * s_max + s) * BLOCK_H + hh  # (BLOCK_H,) partial rows of this split
            if V_HALVES:
                tl.store(PO + slot[:, None] * DV + eh[None, :], acc_lo)
                tl.store(PO + slot[:, None] * DV + HALF + eh[None, :], acc_hi)
            else:
                tl.store(PO + slot[:, None] * DV + ev[None, :], acc)
            tl.store(PM + slot, m_i)
            tl.store(PL + slot, l_i)

    @triton.jit
    def _merged_head(PO, PM, PL, b, h, s_max, n_split, NKV: tl.constexpr, HPG: tl.constexpr, DV: tl.constexpr,
                     BLOCK_H: tl.constexpr, BLOCK_SM: tl.constexpr, dt):
        """Query head h of sequence b: its n_split partials (_attention_splits') merged (one load of them all), the
        output rounded as stored: (DV,) fp32."""
        ss = tl.arange(0, BLOCK_SM)
        s_ok = ss < n_split
        ev = tl.arange(0, DV)
        at = ((b * NKV + h // HPG) * s_max + ss) * BLOCK_H + h % HPG  # (BLOCK_SM,) its partials
        pm = tl.load(PM + at, mask=s_ok, other=float("-inf"), cache_modifier=".cg")
        w = tl.where(s_ok, tl.exp2(pm - tl.max(pm, axis=0)), 0.0)
        l_all = tl.sum(w * tl.load(PL + at, mask=s_ok, other=0.0, cache_modifier=".cg"), axis=0)
        po = tl.load(PO + at[:, None] * DV + ev[None, :], mask=s_ok[:, None], other=0.0,
                     cache_modifier=".cg")  # (BLOCK_SM, DV)
        return (tl.sum(w[:, None] * po, axis=0) / l_all).to(dt).to(tl.float32)

    @triton.jit
    def _mega_step_kernel(
            IDX, POS, WTE, WPE, COS, SIN, N1W, N1B, WQKV, BQKV, KC, VC, WO, BO, N2W, N2B, WFC, BFC, WPR, BPR, NFW,
            NFB, WLM, X, X1, ACC, Q, H, PO, PM, PL, LOGITS, SYNC, ERR, TIMES,
            B, layer_lo, layer_hi, vocab, max_len, eps, qk_scale, s_max,
            D: tl.constexpr, HIDDEN: tl.constexpr, NH: tl.constexpr, NKV: tl.constexpr, HPG: tl.constexpr,
            DK: tl.constexpr, DV: tl.constexpr, N_QKV: tl.constexpr, SHARED_KV: tl.constexpr, ROPE: tl.constexpr,
            NORM: tl.constexpr, HAS_NB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
            BN_QKV: tl.constexpr, ONE_QKV: tl.constexpr, NCH: tl.constexpr, BN_OD: tl.constexpr,
            BLOCK_HID: tl.constexpr, BN_FC: tl.constexpr, ONE_FC: tl.constexpr, BN_PR: tl.constexpr,
            ONE_PR: tl.constexpr, BN_LM: tl.constexpr,
            BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_SM: tl.constexpr, MIN_CHUNK: tl.constexpr,
            DOT_PREC: tl.constexpr, ONLY: tl.constexpr, FINAL: tl.constexpr, MAX_SPIN: tl.constexpr,
            EARLY_ARRIVE: tl.constexpr, FUSED_MLP: tl.constexpr, MLP_PROJ_AHEAD: tl.constexpr,
            VEC_AHEAD: tl.constexpr, ACC_COPIES: tl.constexpr, PRODUCT_2D: tl.constexpr, TIMING: tl.constexpr):
        """Layers layer_lo .. layer_hi - 1 of the decode step (then the LM head if FINAL). ONLY 0: every phase, a
        grid barrier after each (but E with FUSED_MLP), each phase's first weights loaded during the barrier in
        front of it (after this program's arrival with EARLY_ARRIVE, before it without), with its norm's weight and
        bias and its biases (VEC_AHEAD; else loaded where they are used); ONLY 1-5: phase A, B1,
        B2D, E or F alone (the interpreter's launches, no barrier). FUSED_MLP: E and F as one phase, no barrier
        between them (E's launch; F's does nothing and PHASE_LAUNCHES leaves it out).

        The residual stream: X holds the layer's input x0 and X1 its middle x1 (each written by program 0, in a
        phase where nobody reads that buffer); ACC[0] collects the attention's output o W_O^T over the programs
        of B2D (fp32 atomic adds; zeroed by program 0 in A, a phase after its last reader), ACC[1] holds F's
        h W_proj^T (FUSED_MLP: the fused phase's fp32 atomic sums in ACC[1 .. ACC_COPIES], program p's into copy
        p % ACC_COPIES, zeroed by program 0 in B1), and the phase after each forms x1 = x0 + (ACC[0] + b_O),
        x2 = x1 + (ACC[1] + ... + b_proj) as it reads."""
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        dt = X.dtype.element_ty
        pos = tl.load(POS)  # the new token's row; rows 0 .. pos are attended
        length = pos + 1
        rm = tl.arange(0, BLOCK_M)
        m_ok = rm < B
        rk = tl.arange(0, BLOCK_D)
        k_ok = rk < D
        row_ok = m_ok[:, None] & k_ok[None, :]
        KO: tl.constexpr = NH * DV  # the output projection's K
        ACC_A = ACC
        ACC_M = ACC + B * D
        barriers = 0  # the grid barriers passed (their counter's target: barriers x nprog)
        # TIMING (ONLY 0): this program's stamps, 4 a slot (arrival ns and cycles, release ns and cycles): slot 0
        # the start, 5 l + 1 .. 5 l + 5 the barriers after layer l's phases A, B1, B2D, E, F (FUSED_MLP: E's slot
        # left zero, no barrier), 5 L + 1 the end
        STAMP = TIMES + pid * (4 * (5 * (layer_hi - layer_lo) + 2))
        _stamp(STAMP, TIMING)
        _stamp_sm(STAMP + 2, TIMING)
        if (ONLY == 0) | (ONLY == 1):
            w_a = _weight_tile(WQKV + layer_lo * N_QKV * D, pid, N_QKV, BN_QKV, D, BLOCK_D)
            n1w, n1b = _norm_vecs(N1W + layer_lo * D, N1B + layer_lo * D, rk, k_ok, HAS_NB, VEC_AHEAD)
            b_qkv = _tile_vec(BQKV + layer_lo * N_QKV, pid, BN_QKV, N_QKV, VEC_AHEAD)
            b_x = _vec(BPR + tl.maximum(layer_lo - 1, 0) * D, rk, k_ok, VEC_AHEAD)  # (layer 0 reads no stream)
        for layer in range(layer_lo, layer_hi):
            layer64 = layer + tl.zeros([], tl.int64)  # int64 offsets (the interpreter hands a Python int)
            layer_slot = 5 * (layer - layer_lo)  # this layer's stamps: layer_slot + 1 .. layer_slot + 5
            # ---- A: x0 (the embeddings, or the last layer's x1 + MLP output), norm1, [q | k | v], the new k, v cached
            if (ONLY == 0) | (ONLY == 1):
                if layer == 0:
                    tok = tl.load(IDX + rm, mask=m_ok, other=0)
                    x = tl.load(WTE + tok[:, None] * D + rk[None, :], mask=row_ok, other=0.0).to(tl.float32)
                    if not ROPE:  # learned positions (with RoPE the model has no wpe: WPE is a placeholder)
                        x += tl.load(WPE + pos * D + rk, mask=k_ok, other=0.0).to(tl.float32)[None, :]
                    x = x.to(dt).to(tl.float32)
                else:
                    x = _stream_rows(X1, ACC_M, b_x, rm, m_ok, rk, k_ok, B, D, dt, VEC_AHEAD, ACC_COPIES)
                if pid == 0:
                    tl.store(X + rm[:, None] * D + rk[None, :], x.to(dt), mask=row_ok)
                    tl.store(ACC_A + rm[:, None] * D + rk[None, :], tl.zeros([BLOCK_M, BLOCK_D], tl.float32),
                             mask=row_ok)  # last read in the previous layer's E
                a = _norm_rows(x, k_ok, n1w, n1b, D, eps, NORM, HAS_NB, VEC_AHEAD)
                a = a.to(dt).to(tl.float32)
                _gemv_phase(a, w_a, WQKV + layer64 * N_QKV * D, N_QKV, pid, nprog, BQKV + layer * N_QKV, b_qkv, Q,
                            KC, VC, COS, SIN, rm, m_ok, B, layer64, pos, max_len, dt, BN_QKV, D, BLOCK_D, 0, ONE_QKV,
                            NH, NKV, DK, DV, SHARED_KV, ROPE, VEC_AHEAD, PRODUCT_2D)
            if ONLY == 0:
                barriers += 1
                if EARLY_ARRIVE:
                    seen = _grid_arrive(SYNC, STAMP + 4 * (layer_slot + 1), TIMING)
                else:
                    _grid_sync(SYNC, barriers * nprog, ERR, STAMP + 4 * (layer_slot + 1), MAX_SPIN, TIMING)
            # ---- B1: attention, the cache rows split over programs: each split's partial (unnormalized output, row
            # max, row sum) of every query head of its KV head
            chunk = tl.maximum(tl.cdiv(tl.cdiv(length, s_max), BLOCK_N) * BLOCK_N, MIN_CHUNK)
            n_split = tl.cdiv(length, chunk)
            if (ONLY == 0) | (ONLY == 3):
                w_o = _out_tile(WO, layer64, pid, NH, NCH, D, KO, DV, BN_OD)  # B2D's, in flight meanwhile
            if ONLY == 0:
                if EARLY_ARRIVE:
                    _grid_wait(SYNC, seen, barriers * nprog, ERR, STAMP + 4 * (layer_slot + 1), MAX_SPIN,
                               TIMING)
            if (ONLY == 0) | (ONLY == 2):
                if FUSED_MLP:  # the MLP's atomic sums start from zero (ACC[1 ..]'s readers were in A)
                    if pid == 0:
                        for c in tl.static_range(ACC_COPIES):
                            tl.store(ACC_M + c * B * D + rm[:, None] * D + rk[None, :],
                                     tl.zeros([BLOCK_M, BLOCK_D], tl.float32), mask=row_ok)
                _attention_splits(Q, KC, VC, PO, PM, PL, COS, SIN, pid, nprog, B, layer64, max_len, length, chunk,
                                  n_split, s_max, qk_scale, NH, NKV, HPG, DK, DV, SHARED_KV, ROPE, BLOCK_H, BLOCK_N,
                                  DOT_PREC)
            if ONLY == 0:
                barriers += 1
                _grid_sync(SYNC, barriers * nprog, ERR, STAMP + 4 * (layer_slot + 2), MAX_SPIN, TIMING)
            # ---- B2D: a program per (sequence, query head, chunk of outputs): the head's splits merged (one load
            # of them all), o_h rounded as stored, o_h W_O[:, head]^T for its outputs added into ACC[0]
            if (ONLY == 0) | (ONLY == 3):
                for item in range(pid, B * NH * NCH, nprog):
                    if item != pid:
                        w_o = _out_tile(WO, layer64, item, NH, NCH, D, KO, DV, BN_OD)
                    b = item // (NH * NCH)
                    h = (item // NCH) % NH
                    o = _merged_head(PO, PM, PL, b, h, s_max, n_split, NKV, HPG, DV, BLOCK_H, BLOCK_SM, dt)  # (DV,)
                    y = tl.sum(o[None, :] * w_o.to(tl.float32), axis=1)  # (BN_OD,)
                    rn = (item % NCH) * BN_OD + tl.arange(0, BN_OD)
                    tl.atomic_add(ACC_A + b * D + rn, y, mask=rn < D, sem="relaxed", scope="gpu")
            if ONLY == 0:
                barriers += 1
                seen = _barrier_open(SYNC, STAMP + 4 * (layer_slot + 3), TIMING, EARLY_ARRIVE)
            if (ONLY == 0) | (ONLY == 4):
                w_fc = _weight_tile(WFC + layer64 * HIDDEN * D, pid, HIDDEN, BN_FC, D, BLOCK_D)
                n2w, n2b = _norm_vecs(N2W + layer * D, N2B + layer * D, rk, k_ok, HAS_NB, VEC_AHEAD)
                b_fc = _tile_vec(BFC + layer * HIDDEN, pid, BN_FC, HIDDEN, VEC_AHEAD)
                b_o = _vec(BO + layer * D, rk, k_ok, VEC_AHEAD)
            if ONLY == 0:
                _barrier_close(SYNC, seen, barriers * nprog, ERR, STAMP + 4 * (layer_slot + 3), MAX_SPIN, TIMING,
                               EARLY_ARRIVE)
            # ---- E: x1 = x0 + attention output (+ b_O), h = gelu(norm2(x1) W_fc^T + b_fc); FUSED_MLP: then
            # h W_proj^T too, each program's hidden units' share added into ACC[1] (F's work, without its barrier)
            if (ONLY == 0) | (ONLY == 4):
                if FUSED_MLP:  # W_proj^T's rows of this program's first tile of hidden units, in flight meanwhile
                    if MLP_PROJ_AHEAD:
                        w_pr = _weight_tile(WPR + layer64 * HIDDEN * D, pid, HIDDEN, BN_FC, D, BLOCK_D)
                    else:
                        w_pr = w_fc  # (a placeholder: _mlp_phase loads each tile's after its h)
                x = _stream_rows(X, ACC_A, b_o, rm, m_ok, rk, k_ok, B, D, dt, VEC_AHEAD, 1)
                if pid == 0:
                    tl.store(X1 + rm[:, None] * D + rk[None, :], x.to(dt), mask=row_ok)
                a = _norm_rows(x, k_ok, n2w, n2b, D, eps, NORM, HAS_NB, VEC_AHEAD)
                a = a.to(dt).to(tl.float32)
                if FUSED_MLP:
                    _mlp_phase(a, w_fc, w_pr, WFC + layer64 * HIDDEN * D, WPR + layer64 * HIDDEN * D, HIDDEN, pid,
                               nprog, BFC + layer * HIDDEN, b_fc, ACC_M, rm, m_ok, rk, k_ok, B, D, dt, BN_FC,
                               BLOCK_D, ONE_FC, MLP_PROJ_AHEAD, VEC_AHEAD, ACC_COPIES, PRODUCT_2D)
                else:
                    _gemv_phase(a, w_fc, WFC + layer64 * HIDDEN * D, HIDDEN, pid, nprog, BFC + layer * HIDDEN, b_fc,
                                H, KC, VC, COS, SIN, rm, m_ok, B, layer64, pos, max_len, dt, BN_FC, D, BLOCK_D, 2,
                                ONE_FC, NH, NKV, DK, DV, SHARED_KV, False, VEC_AHEAD, PRODUCT_2D)
            if (ONLY == 0) & (FUSED_MLP == 0):
                barriers += 1
                w_pr = _barrier_tile(SYNC, barriers * nprog, ERR, STAMP + 4 * (layer_slot + 4),
                                     WPR + layer64 * D * HIDDEN, pid, D, BN_PR, HIDDEN, BLOCK_HID, MAX_SPIN, TIMING,
                                     EARLY_ARRIVE)
            elif (ONLY == 5) & (FUSED_MLP == 0):
                w_pr = _weight_tile(WPR + layer64 * D * HIDDEN, pid, D, BN_PR, HIDDEN, BLOCK_HID)
            # ---- F: h W_proj^T, its fp32 sums into ACC[1] (the next layer's A adds it to x1)
            if ((ONLY == 0) | (ONLY == 5)) & (FUSED_MLP == 0):
                rh = tl.arange(0, BLOCK_HID)
                h_rows = _load_rows(H, rm, m_ok, rh, rh < HIDDEN, HIDDEN)
                _gemv_phase(h_rows, w_pr, WPR + layer64 * D * HIDDEN, D, pid, nprog, BPR, rk, ACC_M, KC, VC, COS,
                            SIN, rm, m_ok, B, layer64, pos, max_len, dt, BN_PR, HIDDEN, BLOCK_HID, 1, ONE_PR, NH, NKV,
                            DK, DV, SHARED_KV, False, VEC_AHEAD, PRODUCT_2D)  # (EPI 1: no bias; rk a placeholder)
            if ONLY == 0:
                if layer + 1 < layer_hi:  # (the last layer's barrier comes after the loop, the LM head's tile in it)
                    barriers += 1
                    seen = _barrier_open(SYNC, STAMP + 4 * (layer_slot + 5), TIMING, EARLY_ARRIVE)
                    w_a = _weight_tile(WQKV + (layer64 + 1) * N_QKV * D, pid, N_QKV, BN_QKV, D, BLOCK_D)
                    n1w, n1b = _norm_vecs(N1W + (layer + 1) * D, N1B + (layer + 1) * D, rk, k_ok, HAS_NB, VEC_AHEAD)
                    b_qkv = _tile_vec(BQKV + (layer + 1) * N_QKV, pid, BN_QKV, N_QKV, VEC_AHEAD)
                    b_x = _vec(BPR + layer * D, rk, k_ok, VEC_AHEAD)
                    _barrier_close(SYNC, seen, barriers * nprog, ERR, STAMP + 4 * (layer_slot + 5), MAX_SPIN, TIMING,
                                   EARLY_ARRIVE)
        # ---- x = the last layer's x1 + MLP output, the final norm and the LM head
        if ONLY == 0:
            barriers += 1
            seen = _barrier_open(SYNC, STAMP + 4 * (5 * (layer_hi - layer_lo)), TIMING, EARLY_ARRIVE)
        if FINAL:
            w_lm = _weight_tile(WLM, pid, vocab, BN_LM, D, BLOCK_D)
            nfw, nfb = _norm_vecs(NFW, NFB, rk, k_ok, HAS_NB, VEC_AHEAD)
            b_x = _vec(BPR + (layer_hi - 1) * D, rk, k_ok, VEC_AHEAD)
        if ONLY == 0:
            _barrier_close(SYNC, seen, barriers * nprog, ERR, STAMP + 4 * (5 * (layer_hi - layer_lo)), MAX_SPIN,
                           TIMING, EARLY_ARRIVE)
        if FINAL:
            x = _stream_rows(X1, ACC_M, b_x, rm, m_ok, rk, k_ok, B, D, dt, VEC_AHEAD, ACC_COPIES)
            a = _norm_rows(x, k_ok, nfw, nfb, D, eps, NORM, HAS_NB, VEC_AHEAD).to(dt).to(tl.float32)
            _gemv_phase(a, w_lm, WLM, vocab, pid, nprog, NFB, nfb, LOGITS, KC, VC, COS, SIN, rm, m_ok, B, 0, pos,
                        max_len, dt, BN_LM, D, BLOCK_D, 3, False, NH, NKV, DK, DV, SHARED_KV, False, VEC_AHEAD,
                        PRODUCT_2D)
        if TIMING:
            tl.debug_barrier()
            _stamp(STAMP + 4 * (5 * (layer_hi - layer_lo) + 1), TIMING)


def _rope_kind(model, attn, shared: bool) -> int:
    """0: learned positions; 1: RoPE with keys cached rotated (q and the new key rotated in phase A); 2: keys cached
    unrotated and rotated as B1 reads them (a shared latent, which is also the value; MLA's latent RoPE)."""
    if model.transformer.wpe is not None:
        return 0
    return 2 if shared or getattr(attn, "latent_rope", False) else 1


def _attention_form(attn):
    """(W_qkv (N, d), b_qkv (N) or None, W_O (d, nH Dv), b_O or None, nH, nKV, Dk, Dv, shared_kv, scale) of one
    layer's decode form, or a string saying why this layer is not served."""
    from model import GroupedQueryAttention, LatentAttention, TuckerAttention
    if getattr(attn, "decoupled", False):
        return "MLA with decoupled RoPE (its keys are [c_K | k^R]: dcK + dR wide, and only k^R rotates)"
    if isinstance(attn, GroupedQueryAttention):
        dH = attn.head_dim
        return (attn.c_attn.weight, attn.c_attn.bias, attn.c_proj.weight, attn.c_proj.bias, attn.n_head,
                attn.n_kv_head, dH, dH, False, 1.0 / math.sqrt(dH))
    if isinstance(attn, TuckerAttention):
        (_, _, r3), (_, _, p3) = attn.ranks, attn.ranks_post
        form = attn.merged_form()  # W_qkv (d, nH r3 + r3 (+ r~3)), W_out (nH r~3, d), transposes of contiguous
        return (form["W_qkv"].t(), None, form["W_out"].t(), attn.bias, attn.n_head, 1, r3, p3, attn.shared_kv,
                1.0 / math.sqrt(attn.head_dim))
    if isinstance(attn, LatentAttention):  # absorbed, merged: x -> [q_i W_UK,i^T for every head | c_K (| c_V)]
        #                                    (nH dcK + dcK (+ dcK), d), W_UV W_O (d, nH dcK): one latent K/V head
        form = attn.merged_form()
        dc = attn.kv_rank
        return (form["W_in"], form["b_in"], form["W_out"], form["b_out"], attn.n_head, 1, dc, dc, attn.shared_kv,
                attn.scale)
    return f"{type(attn).__name__} (served: MHA, GQA, MQA, MLA, Tucker)"


def unsupported(model, batch_size: int) -> Optional[str]:
    """Why the step kernel cannot decode this model at this batch now (None when it can)."""
    from model import MLP
    import decode_wide  # (it imports this module)
    p = model.lm_head.weight
    if not 1 <= batch_size <= decode_wide.MAX_ROWS:
        return (f"batch {batch_size}: the step kernel serves 1 .. {decode_wide.MAX_ROWS} sequences (1 .. {MAX_ROWS} "
                f"with GEMV tiles, more with decode_wide's tensor-core tiles)")
    cfg = model.config
    if cfg.n_embd > MAX_DIM:
        return f"n_embd {cfg.n_embd} > {MAX_DIM}"
    if p.dtype not in DTYPES or any(t.dtype != p.dtype for t in model.parameters()):
        return "every parameter in one of fp16/bf16/fp32"
    kinds = set()
    for block in model.transformer.h:
        if type(block.mlp) is not MLP:
            return f"MLP {type(block.mlp).__name__} (served: GELU's)"
        form = _attention_form(block.attn)
        if isinstance(form, str):
            return form
        _, _, _, _, nH, nKV, dk, dv, shared, _ = form
        if dk != _pow2(dk, 16) or dv != _pow2(dv, 16):
            return f"head dims {dk}, {dv}: powers of two >= 16"
        if _rope_kind(model, block.attn, shared) == 2 and dk < 32:
            return (f"keys rotated as read (a shared latent, MLA's latent RoPE) {dk} wide: at least 32 (B1 turns "
                    f"them in halves, each a tensor-core product's K of at least 16)")
        kinds.add((nH, nKV, dk, dv, shared))
        norms = (block.ln_1, block.ln_2)
        if any(getattr(n, "kind", None) not in NORM_KINDS for n in norms):
            return "norms other than model.LayerNorm / model.RMSNorm"
    if len(kinds) != 1:
        return "layers of different attention shapes"
    if not _triton_available():
        return "triton is not installed"
    return kernel_unavailable(p, "the decode step")


def step_decoder(model, caches, programs: Optional[int] = None) -> "MegaDecoder":
    """The one-launch decode step for the batch the caches hold: MegaDecoder (GEMV tiles on CUDA cores) for 1 ..
    MAX_ROWS sequences, decode_wide.WideDecoder (tensor-core tiles) above, up to decode_wide.MAX_ROWS."""
    batch = next(iter(caches[0].store.values())).size(0)
    if batch <= MAX_ROWS:
        return MegaDecoder(model, caches, programs)
    from decode_wide import WideDecoder
    return WideDecoder(model, caches, programs)


class MegaDecoder:
    """The model's decode step as one launch (decode_step(idx, caches, pos) -> logits, GPT.decode_step's
    signature, for model.StaticDecoder). Holds the layers' weights stacked (L, ...) in one buffer each (a copy:
    GPT-2 124M ~170 MB in bf16), rebuilt when a parameter changes, and the caches stacked too: the LayerCaches
    given are re-pointed at views of the stacked buffers (their contents copied), so a prefill through
    GPT.forward fills what the kernel reads."""

    def __init__(self, model, caches, programs: Optional[int] = None):
        B = next(iter(caches[0].store.values())).size(0)
        why = unsupported(model, B)
        if why:
            raise ValueError(f"the decode step kernel cannot serve this model: {why}")
        lo, hi = self._rows()
        if not lo <= B <= hi:
            raise ValueError(f"{type(self).__name__} serves {lo} .. {hi} sequences, the caches hold {B} "
                             f"(decode_mega.step_decoder picks the step for the batch)")
        self.model, self.caches, self.batch = model, caches, B
        p = model.lm_head.weight
        self.device, self.dtype = p.device, p.dtype
        cfg = model.config
        self.n_layer, self.d, self.vocab = cfg.n_layer, cfg.n_embd, cfg.vocab_size
        first = _attention_form(model.transformer.h[0].attn)
        _, _, _, _, self.nH, self.nKV, self.dk, self.dv, self.shared, self.scale = first
        attn = model.transformer.h[0].attn  # (every layer's attention is of one kind: unsupported())
        # RoPE (pos_emb 'rope'; else 'learned': 0): 1, q and k rotated in phase A, the keys cached rotated; 2, q in
        # phase A, the keys cached unrotated (a shared latent is the value too; MLA's latent RoPE) and rotated as read
        self.rope = _rope_kind(model, attn, self.shared)
        self.hidden = model.transformer.h[0].mlp.c_fc.out_features
        want = {"kv": (self.nKV, self.dk)} if self.shared else {"k": (self.nKV, self.dk), "v": (self.nKV, self.dv)}
        if len(caches) != self.n_layer:
            raise ValueError(f"MegaDecoder: {len(caches)} caches for {self.n_layer} layers")
        max_len = caches[0].max_len  # every layer's, as the kernel strides them all alike
        for i, c in enumerate(caches):
            got = {name: (t.size(1), t.size(3)) for name, t in c.store.items()}
            bad = [t for t in c.store.values() if t.dtype != self.dtype or t.size(0) != B or t.size(2) != c.max_len]
            if got != want or bad or c.max_len != max_len:
                raise ValueError(f"MegaDecoder: layer {i}'s cache is {got} in {[t.dtype for t in c.store.values()]} "
                                 f"of {c.max_len} positions, expected {want} (heads, dim) in {self.dtype} for {B} "
                                 f"sequences of {max_len} (model.new_caches with the weights' dtype)")
        self.max_len = max_len
        self._check_knobs()
        fit = self._check_fits()  # programs an SM's shared memory holds (None: no limit)
        sms = None
        if self.device.type == "cuda" and not _interpret():
            sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        self.programs = self.program_count(*self._launch_shape(), fit, sms, programs, type(self).__name__)
        self._stack_caches()
        self._key, self.weights = None, None
        self.block_h = _pow2(self.nH // self.nKV, 16)
        self.s_max = max(1, min(MAX_SPLITS, self.programs // (B * self.nKV)))
        self.counters = torch.zeros(1, device=self.device, dtype=torch.int32)  # the barriers' arrivals, zeroed
        #                                                                        each step
        self.error = torch.zeros(1, device=self.device, dtype=torch.int32)
        self.times = None  # while timed_step runs: every program's barrier stamps
        self._buffers()

    @staticmethod
    def program_count(warps: int, per_sm: int, module: str, regs: int, fit: Optional[int], sms: Optional[int],
                      programs: Optional[int], owner: str) -> int:
        """The step's programs: `programs` if given, else sms x per_sm (PROGRAMS_PER_SM of `module`) capped by `fit`
        (programs an SM's shared memory holds: _check_fits; None, no limit); INTERPRET_PROGRAMS where sms is None
        (the interpreter). Every program must be resident at once (a grid barrier waits for all): refuses per_sm
        programs of `warps` warps at up to `regs` registers a thread beyond an SM's 64K registers, and `programs`
        beyond sms x what an SM's registers (and shared memory) hold. E.g. 132 SMs, 2 an SM of 4 warps at 255
        registers: 264 programs, 132 where one fits (fit 1)."""
        resident = 65536 // (32 * warps * regs)  # programs an SM's 64K registers hold
        if per_sm > resident:
            raise ValueError(f"{module}: PROGRAMS_PER_SM x NUM_WARPS = {per_sm} x {warps} > {resident * warps}: every "
                             f"program must be resident at once (a grid barrier waits for all), and "
                             f"{resident * warps} warps of up to {regs} registers fill an SM's register file")
        if fit is not None:  # fewer programs an SM than PROGRAMS_PER_SM where the SM's shared memory holds fewer
            per_sm, resident = min(per_sm, fit), min(resident, fit)
        if sms is None:
            return programs or INTERPRET_PROGRAMS
        count = programs or sms * per_sm
        if count > sms * resident:
            raise ValueError(f"{owner}: programs={count} > {sms} SMs x {resident} "
                             f"programs of {warps} warps (what an SM's registers"
                             f"{' and shared memory' if fit is not None else ''} hold): every program must be "
                             f"resident at once (the grid barriers)")
        return count

    @staticmethod
    def _rows():
        """(fewest, most) sequences this class serves (the GEMV tiles' rows live in registers)."""
        return 1, MAX_ROWS

    @staticmethod
    def _check_knobs() -> None:
        if not isinstance(MLP_COPIES, int) or MLP_COPIES < 1:
            raise ValueError(f"decode_mega: MLP_COPIES={MLP_COPIES!r}: a positive int (copies of the MLP's sums)")
        if MLP_UNITS and (MLP_UNITS < 0 or MLP_UNITS & (MLP_UNITS - 1)):
            raise ValueError(f"decode_mega: MLP_UNITS={MLP_UNITS}: a power of two (hidden units an MLP tile), or 0")

    def _check_fits(self) -> Optional[int]:
        """Refuse what would leave programs unable to start (the warps are checked with the program count); return
        how many programs an SM's shared memory holds, None for no limit (these GEMV tiles take a few KB)."""
        return None

    @staticmethod
    def _launch_shape():
        """(warps a program, programs an SM, the module whose knobs set them, registers a thread at most)."""
        return NUM_WARPS, PROGRAMS_PER_SM, "decode_mega", 255

    def _buffers(self) -> None:
        """The step's working buffers (activations between phases, the attention's partials, the logits)."""
        B, dev, f32 = self.batch, self.device, torch.float32
        parts = B * self.nKV * self.s_max * self.block_h
        self.x = torch.zeros(B, self.d, device=dev, dtype=self.dtype)  # a layer's input x0
        self.x1 = torch.zeros(B, self.d, device=dev, dtype=self.dtype)  # x0 + attention
        self.acc = torch.zeros(1 + self._acc_copies(), B, self.d, device=dev, dtype=f32)  # attention's and MLP's
        #                                                     outputs, summed (the MLP's in _acc_copies() copies)
        self.h = torch.zeros(B, self.hidden, device=dev, dtype=self.dtype)  # the MLP's hidden activations (E -> F;
        #                                                                      unused by the fused MLP)
        self.q = torch.zeros(B, self.nH * self.dk, device=dev, dtype=self.dtype)
        self.po = torch.zeros(parts, self.dv, device=dev, dtype=f32)
        self.pm = torch.zeros(parts, device=dev, dtype=f32)
        self.pl = torch.zeros(parts, device=dev, dtype=f32)
        self.logits = torch.zeros(B, self.vocab, device=dev, dtype=self.dtype)

    def _stack_caches(self) -> None:
        names = ("kv",) if "kv" in self.caches[0].store else ("k", "v")
        self.cache_k = torch.stack([c.store[names[0]] for c in self.caches])  # (L, B, nKV, max_len, Dk)
        self.cache_v = self.cache_k if len(names) == 1 else torch.stack([c.store["v"] for c in self.caches])
        for i, c in enumerate(self.caches):
            c.store[names[0]] = self.cache_k[i]
            if len(names) == 2:
                c.store["v"] = self.cache_v[i]

    def _stacked_weights(self) -> dict:
        """The kernel's weights, stacked over layers; rebuilt when a parameter (or a Tucker merged form) changes."""
        proj_rows = self._proj_transposed()
        key = (proj_rows,) + tuple((t.data_ptr(), t._version) for t in self.model.parameters())
        if self.weights is not None and key == self._key:
            return self.weights
        blocks = self.model.transformer.h
        zeros = lambda n: torch.zeros(n, device=self.device, dtype=self.dtype)
        forms = [_attention_form(b.attn) for b in blocks]
        norm_bias = lambda n: _norm_params(n)[2] if _norm_params(n)[2] is not None else zeros(self.d)
        with torch.no_grad():
            w = dict(
                n1w=torch.stack([b.ln_1.weight for b in blocks]), n1b=torch.stack([norm_bias(b.ln_1) for b in blocks]),
                wqkv=torch.stack([f[0] for f in forms]).contiguous(),
                bqkv=torch.stack([f[1] if f[1] is not None else zeros(f[0].size(0)) for f in forms]),
                wo=torch.stack([f[2] for f in forms]).contiguous(),
                bo=torch.stack([f[3] if f[3] is not None else zeros(self.d) for f in forms]),
                n2w=torch.stack([b.ln_2.weight for b in blocks]), n2b=torch.stack([norm_bias(b.ln_2) for b in blocks]),
                wfc=torch.stack([b.mlp.c_fc.weight for b in blocks]),
                bfc=torch.stack([b.mlp.c_fc.bias if b.mlp.c_fc.bias is not None else zeros(self.hidden) for b in blocks]),
                # W_proj (L, d, hidden), or its transpose (L, hidden, d) for the fused MLP (a program's hidden units'
                # weights are rows)
                wpr=torch.stack([b.mlp.c_proj.weight.t() if proj_rows else b.mlp.c_proj.weight
                                 for b in blocks]).contiguous(),
                bpr=torch.stack([b.mlp.c_proj.bias if b.mlp.c_proj.bias is not None else zeros(self.d) for b in blocks]),
                nfw=self.model.transformer.ln_f.weight, nfb=norm_bias(self.model.transformer.ln_f))
        if self.rope:  # each rotated head's rows interleaved, dims (i, i + Dk/2) side by side: _store_qkv rotates
            #            the pairs a tile holds and stores each dim at its own place
            perm = self.rope_rows(w["wqkv"].size(1))
            w["wqkv"], w["bqkv"] = w["wqkv"][:, perm].contiguous(), w["bqkv"][:, perm].contiguous()
        self.norm_kind, _, bias, self.eps = _norm_params(blocks[0].ln_1)  # decode_linear's reading of a norm
        self.has_nb = bias is not None
        self.weights, self._key = w, key
        return w

    def rope_rows(self, n: int) -> torch.Tensor:
        """The order of W_qkv's n rows with RoPE: within each head phase A rotates (q's, and k's when the keys are
        cached rotated: rope 1), dims (i, i + Dk/2) side by side (row 2 i of the head takes dim i, row 2 i + 1 dim
        i + Dk/2); the other rows as they are."""
        dk, heads = self.dk, self.nH + (self.nKV if self.rope == 1 else 0)
        j = torch.arange(dk)
        within = j // 2 + (j % 2) * (dk // 2)  # (Dk,) the dim each interleaved row holds
        qk = (torch.arange(heads)[:, None] * dk + within[None, :]).flatten()
        return torch.cat([qk, torch.arange(heads * dk, n)]).to(self.device)

    @staticmethod
    def _proj_transposed() -> bool:
        """Whether W_proj is stacked transposed (hidden, d): the fused MLP's (a program's hidden units' rows)."""
        return FUSED_MLP

    def _bn(self, N: int, K: int, tile: int = 0) -> int:
        """Output columns of a GEMV tile: enough for one tile a program where the register budget allows (`tile`,
        TILE by default: elements of rows x columns x K), a power of two."""
        block_m, block_k = _pow2(self.batch, 1), _pow2(K, 16)
        room = max(1, _pow2_floor(max(1, (tile or TILE) // (block_m * block_k))))
        return max(1, min(_pow2(_cdiv(N, self.programs), 1), room))

    @staticmethod
    def _acc_copies() -> int:
        """Copies of the MLP's sums as the knobs are now: MLP_COPIES for the fused MLP (atomic adds), else 1 (phase F
        stores every sum once)."""
        return MLP_COPIES if FUSED_MLP else 1

    def attn_rows(self) -> int:
        """Cache rows a step of B1's loop: BLOCK_N, halved where keys are rotated as read (rope 2)."""
        return max(16, BLOCK_N // 2) if self.rope == 2 else BLOCK_N

    def proj_ahead(self, bn_qkv: int) -> bool:
        """MLP_PROJ_AHEAD as set, or (None) whether phase A's tile (bn_qkv columns) is at most PROJ_ROOM elements."""
        if MLP_PROJ_AHEAD is not None:
            return bool(MLP_PROJ_AHEAD)
        return _pow2(self.batch, 1) * bn_qkv * _pow2(self.d, 16) <= PROJ_ROOM

    def _tiling(self, N: int, K: int):
        """(columns a tile, one tile a program at most) of a GEMV phase."""
        bn = self._bn(N, K)
        return bn, _cdiv(N, bn) <= self.programs

    def _launch(self, w: dict, idx, pos, only: int, layer_lo: int, layer_hi: int, final: bool) -> None:
        tr = self.model.transformer
        B, d, hid, P = self.batch, self.d, self.hidden, self.programs
        n_qkv = w["wqkv"].size(1)
        qkv = self._tiling(n_qkv, d)
        if self.rope and qkv[0] < 2:  # a tile holds whole pairs of dims (_store_qkv's rotation)
            qkv = (2, _cdiv(n_qkv, 2) <= P)
        bn_od = _pow2(_cdiv(d, max(1, P // (B * self.nH))), 1)  # B2D: output chunks a (sequence, head)
        fc, pr = self._tiling(hid, d), self._tiling(d, hid)
        copies = self._acc_copies()
        if self.acc.size(0) < 1 + copies:  # (a knob changed on a live decoder)
            self.acc = torch.zeros(1 + copies, *self.acc.shape[1:], device=self.acc.device, dtype=self.acc.dtype)
        if MLP_UNITS:  # the MLP's hidden units a tile, as set
            fc = (MLP_UNITS, _cdiv(hid, MLP_UNITS) <= P)
        _mega_step_kernel[(P,)](
            idx, pos, tr.wte.weight, *self._position_tables(), w["n1w"], w["n1b"], w["wqkv"], w["bqkv"], self.cache_k,
            self.cache_v, w["wo"], w["bo"], w["n2w"], w["n2b"], w["wfc"], w["bfc"], w["wpr"], w["bpr"], w["nfw"],
            w["nfb"], self.model.lm_head.weight,
            self.x, self.x1, self.acc, self.q, self.h, self.po, self.pm, self.pl, self.logits, self.counters, self.error,
            self.times if self.times is not None else self.counters,
            B, layer_lo, layer_hi, self.vocab, self.max_len, self.eps, self.scale * math.log2(math.e), self.s_max,
            D=d, HIDDEN=hid, NH=self.nH, NKV=self.nKV, HPG=self.nH // self.nKV, DK=self.dk, DV=self.dv, N_QKV=n_qkv,
            SHARED_KV=self.shared, ROPE=self.rope, NORM=self.norm_kind, HAS_NB=self.has_nb, BLOCK_M=_pow2(B, 1),
            BLOCK_D=_pow2(d, 16), BN_QKV=qkv[0], ONE_QKV=qkv[1], NCH=_cdiv(d, bn_od), BN_OD=bn_od,
            BLOCK_HID=_pow2(hid, 16), BN_FC=fc[0], ONE_FC=fc[1], BN_PR=pr[0], ONE_PR=pr[1],
            BN_LM=self._bn(self.vocab, d, TILE_LM), BLOCK_H=self.block_h, BLOCK_N=self.attn_rows(),
            BLOCK_SM=_pow2(self.s_max, 1), MIN_CHUNK=MIN_CHUNK,
            DOT_PREC="ieee" if self.dtype == torch.float32 else "tf32", ONLY=only, FINAL=final, MAX_SPIN=MAX_SPIN,
            EARLY_ARRIVE=EARLY_ARRIVE, FUSED_MLP=FUSED_MLP, MLP_PROJ_AHEAD=self.proj_ahead(qkv[0]),
            VEC_AHEAD=VEC_AHEAD, ACC_COPIES=copies, PRODUCT_2D=PRODUCT_2D,
            TIMING=self.times is not None and only == 0, num_warps=NUM_WARPS)

    def _position_tables(self):
        """(WPE, COS, SIN) for the kernel: the learned positions' table, or with RoPE the model's cos and sin tables
        (positions, Dk/2) fp32; the one not used a placeholder (never read)."""
        tr = self.model.transformer
        if self.rope:
            return tr.wte.weight, self.model.rope_cos.contiguous(), self.model.rope_sin.contiguous()
        return tr.wpe.weight, tr.wte.weight, tr.wte.weight

    def decode_step(self, idx: torch.Tensor, caches, pos: torch.Tensor, phases: bool = False) -> torch.Tensor:
        """GPT.decode_step in one launch: idx (B, 1) token ids, pos the (1,) long device position; the caches must
        be the ones this decoder stacked. Returns the logits (B, vocab) (a buffer the next step overwrites).
        phases=True (always in the interpreter): a launch per phase and layer instead of the barriers."""
        if caches is not self.caches:
            raise ValueError(f"{type(self).__name__}.decode_step: pass the caches the decoder was built on (it reads "
                             f"its own stacked copy of them)")
        idx = idx.reshape(-1)
        w = self._stacked_weights()  # checked once a step (a parameter's change rebuilds them)
        self.counters.zero_()
        self._run(w, idx, pos, phases or _interpret())
        return self.logits

    def _run(self, w: dict, idx, pos, phased: bool) -> None:
        """The step's launches: one, or (phased) a launch per phase and layer, then the final norm and LM head's."""
        if phased:
            for layer in range(self.n_layer):
                for only in PHASE_LAUNCHES[FUSED_MLP]:
                    self._launch(w, idx, pos, only, layer, layer + 1, False)
            self._launch(w, idx, pos, 6, self.n_layer, self.n_layer, True)  # no layer: the final norm and LM head
        else:
            self._launch(w, idx, pos, 0, 0, self.n_layer, True)

    def _stamp_slots(self) -> int:
        """timed_step's slots a program: 0 the start, 5 l + 1 .. 5 l + 5 the barriers after layer l's phases A, B1,
        B2D, E, F (with FUSED_MLP slot 5 l + 4 stays zero, no barrier after E, and 5 l + 5 follows the fused MLP),
        5 L + 1 the end."""
        return 5 * self.n_layer + 2

    def timed_step(self, idx: torch.Tensor, caches, pos: torch.Tensor) -> torch.Tensor:
        """One decode step in one launch, every program stamping the GPU's nanosecond timer and its SM's cycle counter
        at its start, at each grid barrier (arriving, released) and at its end: (programs, slots, 4) int64 on the
        CPU, [.., slot, :] = (arrival ns, arrival cycles, release ns, release cycles), the slots as _stamp_slots
        says (the first and the last: their first two columns only, but the first's third: the program's SM). CUDA
        only (the interpreter runs the phases as separate launches, without barriers)."""
        if self.device.type != "cuda" or _interpret():
            raise ValueError(f"{type(self).__name__}.timed_step needs the one-launch step on a CUDA device")
        self.times = torch.zeros(self.programs, self._stamp_slots(), 4, device=self.device, dtype=torch.int64)
        try:
            self.decode_step(idx, caches, pos)
            torch.cuda.synchronize(self.device)
            return self.times.cpu()
        finally:
            self.times = None

    def check(self) -> None:
        """Raise if a barrier of an earlier step gave up waiting (a step's results were then not valid)."""
        if self.error.item():
            raise RuntimeError("decode_mega: a grid barrier timed out (were all programs resident?)")

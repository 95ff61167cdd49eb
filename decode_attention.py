"""
Decode attention: one new token per sequence attends to its KV cache (flash-decoding in Triton).

The decode step of every variant here reads a cache and nothing else of size: at batch 32 and
16k cached tokens the step is bound by HBM bandwidth, so a fast kernel is one that reads each
cached byte once. Tucker, MQA and absorbed MLA share ONE latent K/V head across all query heads:

    q    (B, nH, Dk)      the new token's queries (rotated if RoPE is on)
    k    (B, nG, L, Dk)   key cache of capacity L, positions 0 .. length-1 valid
    v    (B, nG, L, Dv)   value cache (Tucker/MLA shared KV: the same storage as k)
    o_h  = softmax(q_h k_g^T * scale) v_g   for query head h, KV head g = h // (nH // nG)

Kernel design (split-K "flash decoding"):

    grid = (B * nG, num_splits)           num_splits depends on B, nG, L, the group nH/nG and the SM count only
    program (b, g, s):  all nH/nG query heads of KV head g form one (BLOCK_H, Dk) tile, so each
                        block of BLOCK_N cached rows is read once for the whole group; the rows
                        0 .. length_b-1 are cut into num_splits equal chunks AT RUN TIME (length is
                        read on the device), so every position keeps every SM busy while the grid
                        stays static (one captured CUDA graph serves every decode step)
                        -> running max m, sum l and unnormalized acc per head, written to fp32
                        workspaces; a split with no rows writes m = -inf, l = 0, acc = 0
    combine (b, h):     log-sum-exp merge of the num_splits partials, cast to q's dtype

Latent RoPE: the Tucker/MLA shared latent is cached UNROTATED (it is also the value), so key row p
is rotated by position p as it is read, using the (cos, sin) tables (rotate-half layout of
model.apply_rope; the arithmetic in the cache dtype as apply_rope does, or fp32: ROPE_FP32). The
tables are read as rotations, cos(p t_i) and sin(p t_i) (model.rope_cache), so R(n0 + j) =
R(n0) R(j): for a block of rows n0 .. n0+N-1 the queries are rotated back by R(n0) and key row j
by R(j), from table rows 0 .. N-1 held in registers and row n0, so the tables add ~nothing to the
bytes read (ROPE_MODE: 'rows' reads every row instead). When v is k's storage (or a
k[..., :Dv] view) the value tile is the unrotated key tile already in registers: shared KV is
read from HBM once.

The new token (new_kv, rotate_q, rope_keys='stored'): the step's own key and value need not be written into the
cache first. The split whose rows hold position length-1 takes them from their (B, nG, D) tensors, rotates the key
to that position where the cache holds rotated keys (MHA/GQA, Tucker with separate K/V), stores them into the cache
row and adds them to its online softmax as one more column; the loop over cached rows stops before that row. The
query can be rotated to its position in the same program (rotate_q). One launch then does what a decode layer did
with a rotation, a cache write per cached tensor and the attention.

Head dimensions that are not powers of two (MLA decoupled: dcK + rope dims, e.g. 160) are split
into two column chunks so the padded tiles waste little: with RoPE the two rotate-half halves
(Dk/2 each), otherwise [0, P) and [P, D) with P the largest power of two <= D.

Tucker (tucker_decode_attention) goes one step further, two launches in all: the split kernel
builds its queries from the cores (q_i = rope(q_lat G_i, length-1), one tensor-core product per
head) and projects its normalized partial by the output cores (y_i,s = o_i,s G~_i^T) before
writing it; the combine weighs and sums those (B, nH, S, p2) partials into y_lat = sum_i o_i G~_i^T.
(Linear maps commute with the softmax-weighted merge, so projecting per split is exact.)

SDPA is the fallback (CPU, no Triton, unsupported shapes); `decode_backend` is the one place
that chooses. Kernels compile on their first call: warm up before capturing a CUDA graph.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Optional

import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------
# Tuning knobs, read at call time (set them on the module to sweep: each new value compiles once).

CTAS_PER_SM = 4  # num_splits aims at this many split programs per SM (B * nG * num_splits)
MIN_SPLIT_TOKENS = 256  # ... but a split covers at least this many of the L cache rows
MIN_SPLIT_TOKENS_WIDE = 128  # ... or this many where one KV head serves WIDE_GROUP or more query heads (each row
WIDE_GROUP = 16  # is then that many heads' work: H200, LLaMA-1B at batch 1 and 4k, one 32-head latent in 16 splits
#                 was 1.4-2.2% slower a step than in 32, GQA-8's 4-head groups 1.4% faster in 16; session 51)
MAX_SPLITS = 64  # ... and there are at most this many splits (combine cost grows with it)
BLOCK_N = 64  # cache rows per inner step when the padded key row is <= 128 wide
BLOCK_N_WIDE = 32  # ... and when it is wider (Dk up to 256), to bound registers
NUM_WARPS = None  # split kernel; None: 2, or 4 for 32-head groups (H200 sweep: 2 warps 5-30% faster
#                  for 12-16 heads of 64-160 dims; 4 for 32 heads, where 2 run out of registers)
PDL = ("combine",)  # the kernels launched with programmatic dependent launch (Hopper): such a kernel may start
#   while the kernel before it finishes; each program waits for it (griddepcontrol.wait) before its first load or
#   store. True / False: all / none. H200, B=1 (results/bench/session8/decode_pdl_*): the combine alone is best or
#   within 5% for every variant; with the split kernel too GQA and MLA lose 7-15% and MHA 8% at 4k, Tucker gains 5%.
#   The split kernel also where the caller passes decode_attention's pdl_split (Tucker's factored step, after G_q's
#   short GEMV: -2.2% for LLaMA-1B's Tucker [32,128,128], session 52)
NUM_STAGES = 3  # split kernel's software pipelining depth (cache loads in flight)
# How keys are rotated (all read the tables as rotations; see the module docstring):
#   'q_base':  R(n0 + j) = R(n0) R(j): the block's queries take R(n0)^T, key row j takes R(j) (fixed tiles)
#   'k_angle': key row n0 + j takes cos/sin of n0 + j built by angle addition from rows n0 and j
#   'rows':    key row p takes table row p (reads BLOCK_N rows of both tables per block)
ROPE_MODE = "q_base"
ROPE_FP32 = False  # rotate keys in fp32 (False: in the cache dtype, as model.apply_rope does; fewer
#                    registers: on the H200, r3 = 128 spilled in fp32 and ran 35% slower)
_ROPE_MODES = {"rows": 0, "k_angle": 1, "q_base": 2}
COMBINE_TILE = 4096  # fp32 elements of one combine tile (splits x value columns)
TUCKER_QCORE = "dot"  # Tucker query cores in the split kernel: 'dot' (a tensor-core product per head,
#                       pipelined loop) or 'bcast' (broadcast-multiply-sum over r2 chunks, all heads at once)
TUCKER_QCORE_TILE = 4096  # fp32 elements of one (heads x r2-chunk x r3) 'bcast' step
TUCKER_QCORE_BLOCK_J = 64  # r2 chunk of one 'dot' step
INTERPRET_SMS = 4  # SM count pretended under TRITON_INTERPRET=1 (CPU tests: several splits)

MAX_HEAD_DIM = 256
MAX_GROUP = 32  # query heads per KV head handled by one program (Tucker: all nH heads)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
ROPE_KEYS = ("as_read", "stored")  # decode_attention's rope_keys: how a cache holds its keys


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def device_problem(device: torch.device, interpret: bool) -> Optional[str]:
    """Why a Triton kernel cannot run on `device` (None when it can): it needs CUDA, or the CPU under
    TRITON_INTERPRET=1. interpret: the caller's _interpret() (the tests patch it module by module)."""
    if device.type != "cuda" and not (interpret and device.type == "cpu"):
        return f"device {device.type} (Triton needs CUDA, or the CPU under TRITON_INTERPRET=1)"
    return None


@functools.lru_cache(maxsize=None)
def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # not installed, or broken (no driver): SDPA serves
        return False
    return True


def triton_ops_wanted(interpret: bool) -> bool:
    """Whether a module's Triton kernels are registered as torch.library ops now (fused_loss, fused_gelu,
    fused_mla_rope: at import, and by the model that uses them as it is built): where triton is installed and a
    device can run them (CUDA, or the CPU under the interpreter). interpret: the caller's _interpret(). A
    registration (torch.library.triton_op) imports torch._inductor, ~2 s, which a CPU-only process, whose steps
    never launch the kernels, need not pay."""
    return _triton_available() and (interpret or torch.cuda.is_available())


def _pow2(n: int, lo: int = 16) -> int:
    """Smallest power of two >= max(n, lo): tl.arange and tl.dot need power-of-two tiles >= 16."""
    return max(lo, 1 << max(0, int(n) - 1).bit_length())


def _pow2_floor(n: int) -> int:
    return 1 << (int(n).bit_length() - 1)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------------------
# The one dispatch point.


def kernel_unavailable(t: torch.Tensor, ops: str) -> Optional[str]:
    """Why a Triton kernel of the decode step cannot run on t's device now (None when it can): CUDA (or the CPU under
    TRITON_INTERPRET=1), no CUDA autocast (the `ops` it replaces would take autocast's dtypes), Triton importable.
    Shared by decode_linear and fused_norm."""
    why = device_problem(t.device, _interpret())
    if why:
        return why
    if t.device.type == "cuda" and torch.is_autocast_enabled("cuda"):
        return f"autocast is on ({ops}' output dtypes are autocast's)"
    if not _triton_available():
        return "triton is not installed"
    return None


def _unsupported(q, k, v) -> Optional[str]:
    """Why the Triton kernel cannot run these tensors (None when it can)."""
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtypes q {q.dtype}, k {k.dtype}, v {v.dtype} (one of fp16/bf16/fp32 for all)"
    Dk, Dv = k.size(-1), v.size(-1)
    if not (1 <= Dk <= MAX_HEAD_DIM and 1 <= Dv <= MAX_HEAD_DIM):
        return f"head dims Dk={Dk}, Dv={Dv} (1..{MAX_HEAD_DIM})"
    if q.size(1) // k.size(1) > MAX_GROUP:
        return f"group size nH/nG = {q.size(1) // k.size(1)} > {MAX_GROUP}"
    if len({t.device for t in (q, k, v)}) != 1:
        return "q, k, v on different devices"
    why = device_problem(q.device, _interpret())
    if why:
        return why
    if not _triton_available():
        return "triton is not installed"
    return None


def decode_backend(q, k, v) -> str:
    """The backend backend='auto' picks for these tensors: 'triton' on CUDA when triton imports and
    the shapes are supported, else 'sdpa'. The only place where that choice is made."""
    if q.device.type != "cuda":  # CPU always takes SDPA under 'auto', even when interpreting
        return "sdpa"
    return "triton" if _unsupported(q, k, v) is None else "sdpa"


def _resolve(backend: str, q, k, v) -> str:
    if backend == "auto":
        return decode_backend(q, k, v)
    if backend == "triton":
        why = _unsupported(q, k, v)
        if why is not None:
            raise ValueError(f"decode_attention backend='triton' cannot run: {why}")
        return backend
    if backend == "sdpa":
        return backend
    raise ValueError(f"backend must be 'auto', 'triton' or 'sdpa', got {backend!r}")


# ----------------------------------------------------------------------------------------
# Argument checks shared by both backends (cheap: shapes only, no host sync).


def _check(q, k, v, length, rope, all_rows: bool = True):
    if q.dim() != 3 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"expected q (B, nH, Dk), k (B, nG, L, Dk), v (B, nG, L, Dv); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, nH, Dk = q.shape
    if k.size(0) != B or v.size(0) != B or k.size(3) != Dk or v.shape[1:3] != k.shape[1:3]:
        raise ValueError(f"shape mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    nG, L = k.size(1), k.size(2)
    if nH % nG != 0:
        raise ValueError(f"n_head={nH} must be a multiple of the KV heads nG={nG}")
    if k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("k and v need a unit stride in their last dimension")
    if not torch.is_tensor(length) or length.dtype not in (torch.int32, torch.int64) or length.numel() not in (1, B):
        raise ValueError("length must be an int32/int64 tensor of shape () or (B,)")
    if rope is not None:  # all_rows: keys rotated as read need a row for every cache row; else the new position's
        cos, sin = rope
        if (Dk % 2 or cos.dim() != 2 or cos.shape != sin.shape or (all_rows and cos.size(0) < L)
                or cos.size(1) != Dk // 2):
            raise ValueError(f"rope tables must be ({'>= L=' + str(L) if all_rows else 'rows'}, Dk/2={Dk / 2}) with Dk "
                             f"even; got {tuple(cos.shape)}, {tuple(sin.shape)}")


def _as_length(length, q):
    """length as a tensor on q's device (a Python int is accepted for convenience; tensors are
    graph-safe, an int is baked into a captured graph)."""
    if not torch.is_tensor(length):
        length = torch.tensor(int(length), device=q.device)
    return length


# ----------------------------------------------------------------------------------------
# SDPA fallback: static shapes, a boolean mask over all L rows built from `length` on the device.


def _rotate(x, cos, sin):
    """model.apply_rope (the one RoPE of the repository) of x (..., N, D) by cos/sin (N, D/2),
    computed in at least fp32 (the cache stays unrotated; only this temporary copy is rotated)."""
    from model import apply_rope  # at call time: model imports this module lazily too
    dt = torch.promote_types(x.dtype, torch.float32)
    return apply_rope(x.to(dt), cos.to(dt), sin.to(dt)).to(x.dtype)


def _at_positions(x, rope, pos):
    """x (B, n, D) rotated, sequence b to position pos[b] (pos (B,)), as _rotate does."""
    cos, sin = rope
    return _rotate(x.unsqueeze(2), cos[pos][:, None, None], sin[pos][:, None, None]).squeeze(2)


def _sdpa_decode(q, k, v, length, scale, rope, *, rope_keys="as_read", rotate_q=False, new_kv=None):
    B, nH, Dk = q.shape
    nG, L = k.size(1), k.size(2)
    pos = (length.reshape(-1) - 1).expand(B)  # (B,) the new token's position in each sequence
    if rotate_q:
        q = _at_positions(q, rope, pos)
    if new_kv is not None:  # the cache write the kernel does: row pos[b] of sequence b (index_put_: graph-safe)
        k_new, v_new = new_kv
        if rope is not None and rope_keys == "stored":
            k_new = _at_positions(k_new, rope, pos)
        rows = torch.arange(B, device=q.device)
        k[rows, :, pos] = k_new  # (B, nG, Dk) into k[b, :, pos[b]]
        if v_new is not None:
            v[rows, :, pos] = v_new
    if rope is not None and rope_keys == "as_read":
        cos, sin = rope
        k = _rotate(k, cos[:L], sin[:L])  # (B, nG, L, Dk): key row p rotated by position p
    valid = torch.arange(L, device=q.device) < length.reshape(-1, 1)  # (B or 1, L)
    mask = valid.view(-1, 1, 1, L)  # (B or 1, 1, 1, L): broadcast over heads and the one query
    gqa = {"enable_gqa": True} if nG != nH else {}
    o = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, scale=scale, **gqa)  # (B, nH, 1, Dv)
    return o.squeeze(2)  # (B, nH, Dv)


# ----------------------------------------------------------------------------------------
# Triton kernels (defined only when triton imports; the module works without it).

if _triton_available():
    import triton
    import triton.language as tl
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    @triton.jit
    def _split_kernel(
        Q, G, Gp, K, V, Knew, Vnew, Len, QPos, Cos, Sin, Opart, Mpart, Lpart,
        s_qb, s_qh, s_qd,  # q (B, nH, Dk); with QCORE: q_lat (B, r2) as (s_qb, -, s_qd)
        s_gh, s_gj, s_gd,  # G (nH, r2, r3), QCORE only
        s_gph, s_gpp, s_gpd,  # G~ (nH, P2, Dv), OUTCORE only
        s_kb, s_kg, s_kn,  # k (B, nG, L, Dk), unit last stride
        s_vb, s_vg, s_vn,  # v (B, nG, L, Dv), unit last stride
        s_knb, s_kng, s_vnb, s_vng,  # NEW: the new token's k (B, nG, Dk) and v (B, nG, Dv), unit last stride
        s_len, s_qpos, s_rn, s_rd,  # length, query position: (B,) or () [stride 0]; cos/sin (rows, Dk/2)
        n_kv_heads, group, num_splits, n_rows, qk_scale,  # n_rows = L; qk_scale = scale * log2(e): base-2 softmax
        DK: tl.constexpr, DV: tl.constexpr, R2: tl.constexpr, P2: tl.constexpr, BLOCK_P2: tl.constexpr,
        KSPLIT: tl.constexpr,  # the key row is loaded as columns [0, KSPLIT) ("lo") and [KSPLIT, DK) ("hi")
        BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_KLO: tl.constexpr, BLOCK_KHI: tl.constexpr,
        BLOCK_VLO: tl.constexpr, BLOCK_VHI: tl.constexpr, BLOCK_J: tl.constexpr,
        HAS_KHI: tl.constexpr, HAS_VHI: tl.constexpr, VSPLIT: tl.constexpr,
        ROPE: tl.constexpr, ROPE_MODE: tl.constexpr, ROPE_F32: tl.constexpr, QCORE_DOT: tl.constexpr, V_FROM_K: tl.constexpr, QCORE: tl.constexpr, OUTCORE: tl.constexpr, QPOS_OFF: tl.constexpr,
        DOT_PREC: tl.constexpr,
        NEW: tl.constexpr,  # the new token's key/value come in Knew/Vnew: written to cache row length - 1 here
        ROT_Q: tl.constexpr,  # rotate the query tile to its position (QPos + QPOS_OFF) before use
        ROT_NEW: tl.constexpr,  # rotate the new key to its position before it is stored (a cache of rotated keys)
        PDL: tl.constexpr,  # launched with programmatic dependent launch: wait for the previous kernel first
    ):
        if PDL:  # everything this program reads or writes comes after the previous kernel's completion
            gdc_wait()
            gdc_launch_dependents()
        pid_bg = tl.program_id(0)
        split = tl.program_id(1)
        b = pid_bg // n_kv_heads
        g = pid_bg % n_kv_heads
        b64 = b.to(tl.int64)  # int64 base offsets: caches can exceed 2^31 elements
        n_heads = n_kv_heads * group

        # this split's rows, from the length read on the device: equal chunks of whole blocks
        length = tl.load(Len + b * s_len).to(tl.int32)
        n_blocks = tl.cdiv(length, BLOCK_N)
        chunk = tl.cdiv(n_blocks, num_splits) * BLOCK_N
        start = split * chunk
        end = tl.minimum(start + chunk, length)

        offs_h = tl.arange(0, BLOCK_H)
        heads = g * group + offs_h  # (BLOCK_H,) query heads of KV head g (padded rows masked)
        mask_h = offs_h < group
        d_lo = tl.arange(0, BLOCK_KLO)  # key columns d_lo and KSPLIT + d_hi
        mask_klo = d_lo < KSPLIT
        if HAS_KHI:
            d_hi = tl.arange(0, BLOCK_KHI)
            mask_khi = d_hi < DK - KSPLIT

        # ---- the query tile (BLOCK_H, Dk) of this group, as its lo/hi column chunks ----
        if QCORE and QCORE_DOT:
            # Tucker: q_h = q_lat G_h as one (H, J) x (J, D) tensor-core product per head and r2 chunk,
            # with q_lat in every row: row h of the product is kept. One flat loop over (head, chunk)
            # so that the G loads are software-pipelined like the cache loads.
            q_lo = tl.zeros((BLOCK_H, BLOCK_KLO), dtype=tl.float32)
            if HAS_KHI:
                q_hi = tl.zeros((BLOCK_H, BLOCK_KHI), dtype=tl.float32)
            n_jc = tl.cdiv(R2, BLOCK_J)
            for t in range(0, group * n_jc):
                h = t // n_jc
                offs_j = (t % n_jc) * BLOCK_J + tl.arange(0, BLOCK_J)
                mask_j = offs_j < R2
                x = tl.load(Q + b64 * s_qb + offs_j * s_qd, mask=mask_j, other=0.0)  # (J,)
                xs = tl.broadcast_to(x[None, :], (BLOCK_H, BLOCK_J)).to(K.dtype.element_ty)  # (H, J)
                g_base = G + (g * group + h) * s_gh + offs_j[:, None] * s_gj
                g_lo = tl.load(g_base + d_lo[None, :] * s_gd, mask=mask_j[:, None] & mask_klo[None, :],
                               other=0.0).to(K.dtype.element_ty)  # (J, Dlo)
                row = (offs_h == h)[:, None]
                q_lo += tl.where(row, tl.dot(xs, g_lo, input_precision=DOT_PREC), 0.0)
                if HAS_KHI:
                    g_hi = tl.load(g_base + (KSPLIT + d_hi[None, :]) * s_gd,
                                   mask=mask_j[:, None] & mask_khi[None, :], other=0.0).to(K.dtype.element_ty)
                    q_hi += tl.where(row, tl.dot(xs, g_hi, input_precision=DOT_PREC), 0.0)
        elif QCORE:
            # Tucker: q_h = q_lat G_h, accumulated over r2 in chunks of BLOCK_J: (H, J, D) tiles
            q_lo = tl.zeros((BLOCK_H, BLOCK_KLO), dtype=tl.float32)
            if HAS_KHI:
                q_hi = tl.zeros((BLOCK_H, BLOCK_KHI), dtype=tl.float32)
            for j0 in range(0, R2, BLOCK_J):
                offs_j = j0 + tl.arange(0, BLOCK_J)
                mask_j = offs_j < R2
                x = tl.load(Q + b64 * s_qb + offs_j * s_qd, mask=mask_j, other=0.0).to(tl.float32)  # (J,)
                g_base = G + heads[:, None, None] * s_gh + offs_j[None, :, None] * s_gj
                m_hj = mask_h[:, None, None] & mask_j[None, :, None]
                g_lo = tl.load(g_base + d_lo[None, None, :] * s_gd,
                               mask=m_hj & mask_klo[None, None, :], other=0.0).to(tl.float32)  # (H, J, Dlo)
                q_lo += tl.sum(g_lo * x[None, :, None], axis=1)
                if HAS_KHI:
                    g_hi = tl.load(g_base + (KSPLIT + d_hi[None, None, :]) * s_gd,
                                   mask=m_hj & mask_khi[None, None, :], other=0.0).to(tl.float32)
                    q_hi += tl.sum(g_hi * x[None, :, None], axis=1)
        if not QCORE:
            q_base = Q + b64 * s_qb + heads[:, None] * s_qh
            q_lo = tl.load(q_base + d_lo[None, :] * s_qd, mask=mask_h[:, None] & mask_klo[None, :], other=0.0)
            if HAS_KHI:
                q_hi = tl.load(q_base + (KSPLIT + d_hi[None, :]) * s_qd,
                               mask=mask_h[:, None] & mask_khi[None, :], other=0.0)
        if ROT_Q:  # rotate the queries to the new token's position (length - 1 unless given), in fp32
            pos = tl.maximum(tl.load(QPos + b * s_qpos).to(tl.int32) + QPOS_OFF, 0)
            cq = tl.load(Cos + pos * s_rn + d_lo * s_rd, mask=mask_klo, other=0.0).to(tl.float32)
            sq = tl.load(Sin + pos * s_rn + d_lo * s_rd, mask=mask_klo, other=0.0).to(tl.float32)
            q32_lo, q32_hi = q_lo.to(tl.float32), q_hi.to(tl.float32)
            q_lo = q32_lo * cq[None, :] - q32_hi * sq[None, :]
            q_hi = q32_lo * sq[None, :] + q32_hi * cq[None, :]
        if QCORE or ROT_Q:
            q_lo = q_lo.to(K.dtype.element_ty)
            if HAS_KHI:
                q_hi = q_hi.to(K.dtype.element_ty)

        # value columns (unless they are the key tile's own columns)
        if not V_FROM_K:
            e_lo = tl.arange(0, BLOCK_VLO)
            mask_vlo = e_lo < VSPLIT
            if HAS_VHI:
                e_hi = tl.arange(0, BLOCK_VHI)
                mask_vhi = e_hi < DV - VSPLIT

        m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
        acc_lo = tl.zeros((BLOCK_H, BLOCK_VLO), dtype=tl.float32)
        if HAS_VHI:
            acc_hi = tl.zeros((BLOCK_H, BLOCK_VHI), dtype=tl.float32)

        k_base = K + b64 * s_kb + g * s_kg
        v_base = V + b64 * s_vb + g * s_vg
        offs_n0 = tl.arange(0, BLOCK_N)
        if ROPE and ROPE_MODE > 0:
            # Rotations compose: R(n0 + j) = R(n0) R(j). Rows j = 0 .. BLOCK_N-1 of the tables stay in
            # registers and each block reads only its base row n0, not BLOCK_N rows of both tables
            # (fp32 tables: 3x the bytes of a 64-wide bf16 key row, through L2).
            j_off = offs_n0[:, None] * s_rn + d_lo[None, :] * s_rd
            j_mask = (offs_n0 < n_rows)[:, None] & mask_klo[None, :]
            cos_j = tl.load(Cos + j_off, mask=j_mask, other=0.0).to(tl.float32)  # (N, Dk/2)
            sin_j = tl.load(Sin + j_off, mask=j_mask, other=0.0).to(tl.float32)
            if not ROPE_F32:
                cos_j = cos_j.to(K.dtype.element_ty)
                sin_j = sin_j.to(K.dtype.element_ty)
        if ROPE and ROPE_MODE == 2:
            q32_lo = q_lo.to(tl.float32)  # (H, Dk/2) rotated back by each block's base position below
            q32_hi = q_hi.to(tl.float32)
        # a split beyond `length` runs no iteration and writes the empty partial (m=-inf, l=0).
        # NEW: row length - 1 is the new token's, not yet in the cache: the loop stops before it
        end_read = tl.minimum(end, length - 1) if NEW else end
        for n0 in range(start, end_read, BLOCK_N):
            offs_n = n0 + offs_n0
            mask_n = offs_n < end_read
            # a column mask only where the chunk is padded: a row-only mask keeps loads vectorized
            if BLOCK_KLO == KSPLIT:
                mk_lo = mask_n[:, None]
            else:
                mk_lo = mask_n[:, None] & mask_klo[None, :]
            k_lo = tl.load(k_base + offs_n[:, None] * s_kn + d_lo[None, :], mask=mk_lo, other=0.0)  # (N, Dlo)
            if HAS_KHI:
                if BLOCK_KHI == DK - KSPLIT:
                    mk_hi = mask_n[:, None]
                else:
                    mk_hi = mask_n[:, None] & mask_khi[None, :]
                k_hi = tl.load(k_base + offs_n[:, None] * s_kn + (KSPLIT + d_hi[None, :]), mask=mk_hi,
                               other=0.0)  # (N, Dhi)
            qb_lo = q_lo
            if HAS_KHI:
                qb_hi = q_hi
            if ROPE:
                # row p rotated by position p: (lo, hi) -> (lo cos - hi sin, lo sin + hi cos)
                if ROPE_MODE == 0:  # read every row's angles from the tables
                    r_off = offs_n[:, None] * s_rn + d_lo[None, :] * s_rd
                    c = tl.load(Cos + r_off, mask=mk_lo, other=0.0).to(tl.float32)  # (N, Dk/2)
                    s = tl.load(Sin + r_off, mask=mk_lo, other=0.0).to(tl.float32)
                else:
                    c0 = tl.load(Cos + n0 * s_rn + d_lo * s_rd, mask=mask_klo, other=0.0).to(tl.float32)[None, :]
                    s0 = tl.load(Sin + n0 * s_rn + d_lo * s_rd, mask=mask_klo, other=0.0).to(tl.float32)[None, :]
                    if ROPE_MODE == 1:  # angle addition: the keys get R(n0 + j) = R(n0) R(j)
                        c = c0 * cos_j - s0 * sin_j  # (N, Dk/2) cos of positions n0 .. n0 + N - 1
                        s = s0 * cos_j + c0 * sin_j
                    else:  # q.R(n0 + j)k = (R(n0)^T q).(R(j) k): the (H, Dk) queries take R(n0)
                        c = cos_j
                        s = sin_j
                        qb_lo = (q32_lo * c0 + q32_hi * s0).to(K.dtype.element_ty)
                        qb_hi = (q32_hi * c0 - q32_lo * s0).to(K.dtype.element_ty)
                if ROPE_F32:
                    lo32, hi32 = k_lo.to(tl.float32), k_hi.to(tl.float32)
                    kr_lo = (lo32 * c - hi32 * s).to(k_lo.dtype)
                    kr_hi = (lo32 * s + hi32 * c).to(k_hi.dtype)
                else:  # in the cache's dtype, as model.apply_rope does
                    c = c.to(k_lo.dtype)
                    s = s.to(k_lo.dtype)
                    kr_lo = k_lo * c - k_hi * s
                    kr_hi = k_lo * s + k_hi * c
            else:
                kr_lo = k_lo
                if HAS_KHI:
                    kr_hi = k_hi
            # scores (H, N) of all heads of the group against this block, fp32 accumulation
            qk = tl.dot(qb_lo, tl.trans(kr_lo), input_precision=DOT_PREC)
            if HAS_KHI:
                qk += tl.dot(qb_hi, tl.trans(kr_hi), input_precision=DOT_PREC)
            qk = tl.where(mask_n[None, :], qk * qk_scale, float("-inf"))
            # online softmax: rescale what was accumulated by exp2(m_old - m_new)
            m_new = tl.maximum(m_i, tl.max(qk, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(qk - m_new[:, None])  # (H, N)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            m_i = m_new
            if V_FROM_K:  # shared KV: the unrotated key tile is the value tile (one HBM read)
                v_lo = k_lo
                if HAS_VHI:
                    v_hi = k_hi
            else:
                if BLOCK_VLO == VSPLIT:
                    mv_lo = mask_n[:, None]
                else:
                    mv_lo = mask_n[:, None] & mask_vlo[None, :]
                v_lo = tl.load(v_base + offs_n[:, None] * s_vn + e_lo[None, :], mask=mv_lo, other=0.0)  # (N, Dvlo)
                if HAS_VHI:
                    if BLOCK_VHI == DV - VSPLIT:
                        mv_hi = mask_n[:, None]
                    else:
                        mv_hi = mask_n[:, None] & mask_vhi[None, :]
                    v_hi = tl.load(v_base + offs_n[:, None] * s_vn + (VSPLIT + e_hi[None, :]), mask=mv_hi,
                                   other=0.0)  # (N, Dvhi)
            p_v = p.to(v_lo.dtype)
            acc_lo = acc_lo * alpha[:, None] + tl.dot(p_v, v_lo, input_precision=DOT_PREC)
            if HAS_VHI:
                acc_hi = acc_hi * alpha[:, None] + tl.dot(p_v, v_hi, input_precision=DOT_PREC)

        if NEW:
            # the new token (row p = length - 1), in the one split whose rows hold p: its key and value come
            # from Knew/Vnew (registers), are stored into the cache here (no separate cache-write kernel), and
            # join the online softmax as one more column, scored against the query at its own rotation
            p_new = length - 1
            if (p_new >= start) & (p_new < end):
                kn_base = Knew + b64 * s_knb + g * s_kng
                kn_lo = tl.load(kn_base + d_lo, mask=mask_klo, other=0.0).to(K.dtype.element_ty)  # (Dlo,)
                if HAS_KHI:
                    kn_hi = tl.load(kn_base + KSPLIT + d_hi, mask=mask_khi, other=0.0).to(K.dtype.element_ty)
                if ROPE or ROT_NEW:  # the key at position p: (lo, hi) -> (lo cos - hi sin, lo sin + hi cos), fp32
                    cn = tl.load(Cos + p_new * s_rn + d_lo * s_rd, mask=mask_klo, other=0.0).to(tl.float32)
                    sn = tl.load(Sin + p_new * s_rn + d_lo * s_rd, mask=mask_klo, other=0.0).to(tl.float32)
                    lo32, hi32 = kn_lo.to(tl.float32), kn_hi.to(tl.float32)
                    kr_lo = (lo32 * cn - hi32 * sn).to(K.dtype.element_ty)
                    kr_hi = (lo32 * sn + hi32 * cn).to(K.dtype.element_ty)
                    if ROT_NEW:  # a cache of rotated keys stores the rotated one
                        kn_lo = kr_lo
                        kn_hi = kr_hi
                else:
                    kr_lo = kn_lo
                    if HAS_KHI:
                        kr_hi = kn_hi
                row_p = k_base + p_new.to(tl.int64) * s_kn
                tl.store(row_p + d_lo, kn_lo, mask=mask_klo)
                if HAS_KHI:
                    tl.store(row_p + KSPLIT + d_hi, kn_hi, mask=mask_khi)
                s_new = tl.sum(q_lo.to(tl.float32) * kr_lo.to(tl.float32)[None, :], axis=1)  # (H,)
                if HAS_KHI:
                    s_new += tl.sum(q_hi.to(tl.float32) * kr_hi.to(tl.float32)[None, :], axis=1)
                s_new = s_new * qk_scale
                m_new = tl.maximum(m_i, s_new)
                alpha = tl.exp2(m_i - m_new)
                p_n = tl.exp2(s_new - m_new)  # (H,)
                l_i = l_i * alpha + p_n
                m_i = m_new
                if V_FROM_K:  # shared KV: the value is the stored (unrotated) key's columns
                    acc_lo = acc_lo * alpha[:, None] + p_n[:, None] * kn_lo.to(tl.float32)[None, :]
                    if HAS_VHI:
                        acc_hi = acc_hi * alpha[:, None] + p_n[:, None] * kn_hi.to(tl.float32)[None, :]
                else:
                    vn_base = Vnew + b64 * s_vnb + g * s_vng
                    vrow_p = v_base + p_new.to(tl.int64) * s_vn
                    vn_lo = tl.load(vn_base + e_lo, mask=mask_vlo, other=0.0).to(V.dtype.element_ty)  # (Dvlo,)
                    tl.store(vrow_p + e_lo, vn_lo, mask=mask_vlo)
                    acc_lo = acc_lo * alpha[:, None] + p_n[:, None] * vn_lo.to(tl.float32)[None, :]
                    if HAS_VHI:
                        vn_hi = tl.load(vn_base + VSPLIT + e_hi, mask=mask_vhi, other=0.0).to(V.dtype.element_ty)
                        tl.store(vrow_p + VSPLIT + e_hi, vn_hi, mask=mask_vhi)
                        acc_hi = acc_hi * alpha[:, None] + p_n[:, None] * vn_hi.to(tl.float32)[None, :]

        # the value columns held in acc_lo / acc_hi
        if V_FROM_K:  # the key chunks' columns, cut at DV
            vc_lo = d_lo
            vm_lo = mask_klo & (d_lo < DV)
            if HAS_VHI:
                vc_hi = KSPLIT + d_hi
                vm_hi = mask_khi & (KSPLIT + d_hi < DV)
        else:
            vc_lo = e_lo
            vm_lo = mask_vlo
            if HAS_VHI:
                vc_hi = VSPLIT + e_hi
                vm_hi = mask_vhi

        # partials: Mpart/Lpart (B, nH, S), Opart (B, nH, S, DV) [OUTCORE: (B, nH, S, P2)], fp32
        row = (b64 * n_heads + heads) * num_splits + split  # (H,)
        tl.store(Mpart + row, m_i, mask=mask_h)
        tl.store(Lpart + row, l_i, mask=mask_h)
        if OUTCORE:
            # Tucker output cores on this split's normalized partial: y_h = (acc_h / l_h) G~_h^T (P2,),
            # one (H, Dv) x (Dv, P2) tensor-core product per head, row h kept; the combine then only
            # weighs and sums (B, nH, S, P2) partials. Empty split: l = 0, y = 0 (weight 0 anyway).
            inv_l = 1.0 / tl.where(l_i > 0, l_i, 1.0)
            a_lo = (acc_lo * inv_l[:, None]).to(K.dtype.element_ty)  # (H, Dvlo)
            if HAS_VHI:
                a_hi = (acc_hi * inv_l[:, None]).to(K.dtype.element_ty)
            offs_p = tl.arange(0, BLOCK_P2)
            mask_p = offs_p < P2
            y = tl.zeros((BLOCK_H, BLOCK_P2), dtype=tl.float32)
            for h in range(0, group):
                gp_base = Gp + (g * group + h) * s_gph + offs_p[None, :] * s_gpp
                gp_lo = tl.load(gp_base + vc_lo[:, None] * s_gpd, mask=vm_lo[:, None] & mask_p[None, :],
                                other=0.0).to(K.dtype.element_ty)  # (Dvlo, P2) = G~_h[:, lo]^T
                y_h = tl.dot(a_lo, gp_lo, input_precision=DOT_PREC)  # (H, P2)
                if HAS_VHI:
                    gp_hi = tl.load(gp_base + vc_hi[:, None] * s_gpd, mask=vm_hi[:, None] & mask_p[None, :],
                                    other=0.0).to(K.dtype.element_ty)
                    y_h += tl.dot(a_hi, gp_hi, input_precision=DOT_PREC)
                y += tl.where((offs_h == h)[:, None], y_h, 0.0)
            tl.store(Opart + row[:, None] * P2 + offs_p[None, :], y, mask=mask_h[:, None] & mask_p[None, :])
        else:
            o_base = Opart + row[:, None] * DV
            tl.store(o_base + vc_lo[None, :], acc_lo, mask=mask_h[:, None] & vm_lo[None, :])
            if HAS_VHI:
                tl.store(o_base + vc_hi[None, :], acc_hi, mask=mask_h[:, None] & vm_hi[None, :])

    @triton.jit
    def _combine_kernel(
        Opart, Mpart, Lpart, Out, s_ob, s_oh, n_heads, num_splits,
        DV: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr,
    ):
        if PDL:
            gdc_wait()
            gdc_launch_dependents()
        # program (b*nH + h, column block): o = sum_s w_s acc_s / sum_s w_s l_s, w_s = 2^(m_s - max m)
        row = tl.program_id(0).to(tl.int64)
        offs_s = tl.arange(0, BLOCK_S)
        offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
        mask_s = offs_s < num_splits
        mask_d = offs_d < DV
        m = tl.load(Mpart + row * num_splits + offs_s, mask=mask_s, other=float("-inf"))  # (S,)
        l = tl.load(Lpart + row * num_splits + offs_s, mask=mask_s, other=0.0)
        m_max = tl.max(m, axis=0)
        m_max = tl.where(m_max == float("-inf"), 0.0, m_max)  # length 0: all empty, output 0
        w = tl.exp2(m - m_max)  # empty splits: 2^-inf = 0
        den = tl.sum(w * l, axis=0)
        o = tl.load(Opart + (row * num_splits + offs_s[:, None]) * DV + offs_d[None, :],
                    mask=mask_s[:, None] & mask_d[None, :], other=0.0)  # (S, D)
        o = tl.sum(o * w[:, None], axis=0) / tl.where(den > 0, den, 1.0)
        b = row // n_heads
        h = row % n_heads
        tl.store(Out + b * s_ob + h * s_oh + offs_d, o.to(Out.dtype.element_ty), mask=mask_d)

    @triton.jit
    def _combine_outcore_kernel(
        Ypart, Mpart, Lpart, Out, s_ob, n_heads, num_splits,
        P2: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_P: tl.constexpr, PDL: tl.constexpr,
    ):
        if PDL:
            gdc_wait()
            gdc_launch_dependents()
        # Tucker output, program (b, p block): y[b, p] = sum_h sum_s w[h, s] Y[b, h, s, p] with
        # Y = the split kernel's projected, normalized partials and w[h, s] = the share of split s
        # in head h's softmax: 2^(m_s - max m) l_s / sum over splits. One (H, S, P) tile.
        b = tl.program_id(0).to(tl.int64)
        offs_p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
        mask_p = offs_p < P2
        offs_h = tl.arange(0, BLOCK_H)
        offs_s = tl.arange(0, BLOCK_S)
        mask_hs = (offs_h < n_heads)[:, None] & (offs_s < num_splits)[None, :]
        hs = (b * n_heads + offs_h[:, None]) * num_splits + offs_s[None, :]  # (H, S) partial rows
        m = tl.load(Mpart + hs, mask=mask_hs, other=float("-inf"))
        l = tl.load(Lpart + hs, mask=mask_hs, other=0.0)
        m_max = tl.max(m, axis=1)
        m_max = tl.where(m_max == float("-inf"), 0.0, m_max)  # padded heads (and length 0): all empty
        w = tl.exp2(m - m_max[:, None]) * l
        den = tl.sum(w, axis=1)
        w = w / tl.where(den > 0, den, 1.0)[:, None]  # (H, S)
        yp = tl.load(Ypart + hs[:, :, None] * P2 + offs_p[None, None, :],
                     mask=mask_hs[:, :, None] & mask_p[None, None, :], other=0.0)  # (H, S, P)
        y = tl.sum(tl.sum(yp * w[:, :, None], axis=1), axis=0)  # (P,)
        tl.store(Out + b * s_ob + offs_p, y.to(Out.dtype.element_ty), mask=mask_p)

last_launch = {}  # the compiled kernels of the last call (registers, spills: .n_regs, .n_spills), for tuning


def pdl_capable(device: torch.device) -> bool:
    """Programmatic dependent launch is possible: a CUDA device of compute capability 9.0 or more (the
    interpreter has no griddepcontrol)."""
    return device.type == "cuda" and not _interpret() and torch.cuda.get_device_capability(device)[0] >= 9


def _pdl_launch(pdl: bool) -> dict:
    """The launch option of a kernel launched with programmatic dependent launch (none otherwise)."""
    return {"launch_pdl": True} if pdl else {}


def _empty(shape, device, dtype):
    """Workspaces and outputs of the kernels (tests swap in NaN-filled ones: every element read must
    have been written)."""
    return torch.empty(shape, device=device, dtype=dtype)


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return INTERPRET_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


# Shared memory of an SM (bytes) by compute capability, where torch's device properties lack the field: V100 96 KB,
# T4 (sm_75) 64 KB, A100 and Jetson Orin 164 KB, the GeForce / RTX Ampere and Ada parts (sm_86, sm_89: RTX 3090 /
# 4090, A10, A6000, L4, L40) and consumer Blackwell (sm_120) 100 KB, Hopper and Blackwell data-center parts 228 KB
# (CUDA C++ Programming Guide, "Compute capabilities"). From sm_80 on a kernel launch may take all but 1 KB of it (the
# opt-in maximum a block; the system reserves 1 KB a block), before it all (no reserve): reserved_per_program.
SHARED_PER_SM = {(7, 0): 96 * 1024, (7, 5): 64 * 1024, (8, 0): 164 * 1024, (8, 6): 100 * 1024, (8, 7): 164 * 1024,
                 (8, 9): 100 * 1024, (9, 0): 228 * 1024, (10, 0): 228 * 1024, (12, 0): 100 * 1024}


def reserved_per_program(major: int) -> int:
    """Shared memory (bytes) the system reserves for each resident program (block) on a GPU of compute capability
    major.x: 1 KB from sm_80 on, none before (CUDA C++ Programming Guide, "Compute capabilities": "shared memory
    reserved by the system per thread block")."""
    return 1024 if major >= 8 else 0


PIPELINED_FROM = 8  # compute capability (major) from which Triton software-pipelines a loop's loads into STAGES-deep
#                    shared-memory buffers: Triton 3.6's triton/backends/nvidia/compiler.py make_ttgir adds the
#                    pipeliner (add_assign_latencies, add_schedule_loops, add_pipeline) only under `if capability //
#                    10 in [8, 9]:` (line 268) or `elif capability // 10 >= 10:` (line 278); sm_70 / sm_75 (V100, T4:
#                    no cp.async) take the `else:` (line 294), LICM alone. There a tl.dot's operands sit in shared
#                    memory one step at a time, as float32 (no HMMA: an FMA loop), whatever num_stages says


def pipelined_loads(major: int) -> bool:
    """Whether Triton multi-buffers a loop's loads (num_stages) in shared memory on a GPU of compute capability
    major.x: from PIPELINED_FROM on (the offline compiles' rule, as reserved_per_program is the reserve's)."""
    return major >= PIPELINED_FROM


def pipelines_loads(device: torch.device) -> bool:
    """Whether Triton multi-buffers a loop's loads (num_stages) in shared memory on `device`: a CUDA GPU of compute
    capability PIPELINED_FROM.0 or more. Elsewhere (the CPU, the interpreter) True: the sm_80+ accounting. Read once
    a GPU, like shared_memory (fused_mla_rope asks at every call of its op)."""
    if torch.device(device).type != "cuda":
        return True
    return pipelined_loads(_capability_major(_cuda_index(device)))


def program_reserve(device: torch.device) -> int:
    """reserved_per_program for a CUDA device: the shared memory (bytes) the system takes beside each resident
    program's own, which decides how many programs share an SM (decode_wide's fit)."""
    return reserved_per_program(_capability_major(_cuda_index(device)))


def _cuda_index(device) -> int:
    """The index of a CUDA device (a bare 'cuda': the current one), the key of the per-GPU caches below."""
    index = torch.device(device).index
    return torch.cuda.current_device() if index is None else index


@functools.lru_cache(maxsize=None)
def _capability_major(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


def shared_memory(device: torch.device) -> tuple:
    """(bytes of shared memory one program may take at most, bytes an SM holds) on a CUDA device: the largest a
    kernel launches with (Triton refuses a larger one: OutOfResources), and what the programs resident on one SM
    share (each also takes the 1 KB the SM reserves from sm_80 on: program_reserve). From torch's device properties
    (shared_memory_per_block_optin, shared_memory_per_multiprocessor), else SHARED_PER_SM by compute capability (48
    KB, the least any CUDA GPU offers, if unknown). H100 / H200: 232,448 and 233,472. Called outside traced code (a
    triton_op's body, a decoder's constructor), as a Python function Dynamo need not trace. Read once a GPU (a bare
    'cuda' is the current one)."""
    return _shared_memory(_cuda_index(device))


@functools.lru_cache(maxsize=None)
def _shared_memory(index: int) -> tuple:
    props = torch.cuda.get_device_properties(index)
    per_sm = getattr(props, "shared_memory_per_multiprocessor", None) or \
        SHARED_PER_SM.get((props.major, props.minor), 48 * 1024)
    per_block = getattr(props, "shared_memory_per_block_optin", None) or per_sm - reserved_per_program(props.major)
    return int(per_block), int(per_sm)


def num_splits(B: int, nG: int, L: int, device, block_n: Optional[int] = None, group: int = 1) -> int:
    """Splits of the cache per (sequence, KV head): enough programs to keep CTAS_PER_SM per SM busy,
    each split at least MIN_SPLIT_TOKENS of the capacity L (MIN_SPLIT_TOKENS_WIDE where a KV head serves
    `group` >= WIDE_GROUP query heads), at most MAX_SPLITS; then as few as give the same chunk of whole
    blocks at full length (17 splits of 16 blocks each over 256 blocks would leave one empty). Depends on
    the static shapes only (never on `length`), so a captured graph's grid stays valid."""
    sms = INTERPRET_SMS if _interpret() else _sm_count(torch.device(device))
    want = _cdiv(CTAS_PER_SM * sms, B * nG)
    min_tokens = MIN_SPLIT_TOKENS_WIDE if group >= WIDE_GROUP else MIN_SPLIT_TOKENS
    s = max(1, min(want, _cdiv(L, min_tokens), MAX_SPLITS))
    blocks = _cdiv(L, block_n or BLOCK_N)
    return max(1, _cdiv(blocks, _cdiv(blocks, s)))


def _layout(Dk: int, Dv: int, rope: bool, v_from_k: bool):
    """Column chunks of the key and value rows (see the module docstring)."""
    if rope:
        ksplit = Dk // 2  # rotate-half pairs (x[i], x[i + Dk/2]) live in lo and hi at the same index
    else:
        ksplit = Dk if Dk == _pow2_floor(Dk) else _pow2_floor(Dk)
    klo, khi = ksplit, Dk - ksplit
    if v_from_k:  # the value columns are the key tile's, cut at Dv
        vsplit, vlo, vhi = ksplit, _pow2(klo), _pow2(khi)
        has_vhi = Dv > ksplit
    else:
        vsplit = Dv if Dv == _pow2_floor(Dv) else _pow2_floor(Dv)
        vlo, vhi, has_vhi = _pow2(vsplit), _pow2(Dv - vsplit), Dv > vsplit
    return dict(KSPLIT=ksplit, BLOCK_KLO=_pow2(klo), BLOCK_KHI=_pow2(khi), HAS_KHI=khi > 0,
                VSPLIT=vsplit, BLOCK_VLO=vlo, BLOCK_VHI=vhi, HAS_VHI=has_vhi)


def _v_is_k(k, v) -> bool:
    """v is k's storage (v is k, or a k[..., :Dv] view): then values come from the key tile."""
    return (v.data_ptr() == k.data_ptr() and v.stride() == k.stride() and v.size(-1) <= k.size(-1))


def pdl_launches(device: torch.device, pdl_split: bool = False) -> dict:
    """{'split': bool, 'combine': bool}: which of the two kernels are launched with programmatic dependent launch: those
    PDL names (True: both, False: neither), the split kernel also where the caller asks (pdl_split), on a capable
    device only."""
    capable = pdl_capable(device)
    return {name: capable and (PDL is True or (PDL is not False and (name in PDL or (name == "split" and pdl_split))))
            for name in ("split", "combine")}


def _launch(q, k, v, length, scale, rope, *, G=None, G_post=None, q_pos=None, out=None,
            tables=None, rotate_q=False, rotate_new=False, new_kv=None, pdl_split=False):
    """Split kernel + combine. Plain: q (B, nH, Dk) -> out (B, nH, Dv). Tucker (G given): q is
    q_lat (B, r2), nH = G.size(0), queries rotated to q_pos (None: length - 1), and the combine
    applies G_post, writing y_lat (B, p2) into `out`. rope: the tables when cached keys are rotated as
    read; tables: the tables for rotate_q / rotate_new otherwise (decode_attention's arguments)."""
    B, nG, L, Dk = k.shape
    Dv = v.size(-1)
    nH = G.size(0) if G is not None else q.size(1)
    group = nH // nG
    v_from_k = _v_is_k(k, v)
    tables = rope if rope is not None else tables
    rotate_q = rotate_q or (G is not None and rope is not None)  # the fused Tucker kernel rotates its own queries
    lay = _layout(Dk, Dv, tables is not None, v_from_k)
    block_n = BLOCK_N if lay["BLOCK_KLO"] + (lay["BLOCK_KHI"] if lay["HAS_KHI"] else 0) <= 128 else BLOCK_N_WIDE
    S = num_splits(B, nG, L, q.device, block_n, group)
    block_h = _pow2(group)
    dev = q.device
    m_part = _empty((B, nH, S), dev, torch.float32)  # running max per split (log2 units)
    l_part = _empty((B, nH, S), dev, torch.float32)  # running sum of exp2 per split
    P2 = G_post.size(1) if G_post is not None else 1
    # unnormalized acc per split, or with G_post the split's normalized output projected by G~_h
    o_part = _empty((B, nH, S, Dv if G_post is None else P2), dev, torch.float32)
    length = length.reshape(-1)  # (1,) or (B,)
    s_len = 0 if length.numel() == 1 else length.stride(0)
    # the query's position: q_pos, or length - 1 read from the same tensor (no extra kernel)
    qpos, qpos_off = (length, -1) if q_pos is None else (q_pos.reshape(-1), 0)
    s_qpos = 0 if qpos.numel() == 1 else qpos.stride(0)
    cos, sin = tables if tables is not None else (k, k)  # dummies when off (never read)
    if tables is not None and cos.stride() != sin.stride():  # one set of strides serves both tables
        cos, sin = cos.contiguous(), sin.contiguous()
    s_rn, s_rd = (cos.stride(0), cos.stride(1)) if tables is not None else (0, 0)
    k_new, v_new = new_kv if new_kv is not None else (k, None)  # dummies when off (never read)
    if v_new is None:
        v_new = k_new
    kns = (k_new.stride(0), k_new.stride(1)) if new_kv is not None else (0, 0)
    vns = (v_new.stride(0), v_new.stride(1)) if new_kv is not None else (0, 0)
    if G is not None:
        r2 = G.size(1)
        if TUCKER_QCORE == "dot":
            block_j = min(_pow2(r2), _pow2(TUCKER_QCORE_BLOCK_J))
        else:
            block_j = max(2, min(_pow2(r2, 2), _pow2_floor(max(1, TUCKER_QCORE_TILE // (block_h * lay["BLOCK_KLO"])))))
        qs = (q.stride(0), 0, q.stride(1))
        gs = G.stride()
    else:
        r2, block_j = 1, 2
        qs = q.stride()
        gs = (0, 0, 0)
    gps = G_post.stride() if G_post is not None else (0, 0, 0)
    num_warps = NUM_WARPS or (4 if block_h >= 32 else 2)
    pdl = pdl_launches(dev, pdl_split)
    last_launch["split"] = _split_kernel[(B * nG, S)](
        q, G if G is not None else q, G_post if G_post is not None else q, k, v, k_new, v_new, length, qpos, cos, sin,
        o_part, m_part, l_part,
        *qs, *gs, *gps, k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2), *kns, *vns,
        s_len, s_qpos, s_rn, s_rd, nG, group, S, L, scale * math.log2(math.e),
        DK=Dk, DV=Dv, R2=r2, P2=P2, BLOCK_P2=_pow2(P2), BLOCK_H=block_h, BLOCK_N=block_n, BLOCK_J=block_j,
        ROPE=rope is not None, ROPE_MODE=_ROPE_MODES[ROPE_MODE], ROPE_F32=ROPE_FP32, V_FROM_K=v_from_k,
        QCORE=G is not None, QCORE_DOT=TUCKER_QCORE == "dot", OUTCORE=G_post is not None, QPOS_OFF=qpos_off,
        DOT_PREC="ieee" if k.dtype == torch.float32 else "tf32",
        NEW=new_kv is not None, ROT_Q=rotate_q, ROT_NEW=rotate_new and new_kv is not None,
        num_warps=num_warps, num_stages=NUM_STAGES, PDL=pdl["split"], **lay, **_pdl_launch(pdl["split"]),
    )
    block_s = _pow2(S, 1)
    if G_post is None:
        if out is None:
            out = _empty((B, nH, Dv), dev, q.dtype)
        block_d = max(16, min(_pow2(Dv), _pow2_floor(max(1, COMBINE_TILE // block_s))))
        last_launch["combine"] = _combine_kernel[(B * nH, _cdiv(Dv, block_d))](
            o_part, m_part, l_part, out, out.stride(0), out.stride(1), nH, S,
            DV=Dv, BLOCK_S=block_s, BLOCK_D=block_d, PDL=pdl["combine"], num_warps=4, **_pdl_launch(pdl["combine"]))
    else:
        bh = _pow2(nH, 1)
        block_p = max(2, min(_pow2(P2, 2), _pow2_floor(max(1, COMBINE_TILE // (bh * block_s)))))  # (H, S, P) tile
        last_launch["combine"] = _combine_outcore_kernel[(B, _cdiv(P2, block_p))](
            o_part, m_part, l_part, out, out.stride(0), nH, S,
            P2=P2, BLOCK_H=bh, BLOCK_S=block_s, BLOCK_P=block_p, PDL=pdl["combine"], num_warps=4, **_pdl_launch(pdl["combine"]))
    return out


# ----------------------------------------------------------------------------------------
# Public API


def decode_attention(q, k, v, length, *, scale, rope=None, rope_keys="as_read", rotate_q=False, new_kv=None,
                     pdl_split=False, backend="auto") -> torch.Tensor:
    """One new token per sequence attends to its cache.
    q: (B, nH, Dk) the new token's queries (already rotated when RoPE is on, unless rotate_q).
    k: (B, nG, L, Dk) key cache buffer of capacity L (last-dim stride 1, any other strides).
    v: (B, nG, L, Dv) value cache buffer (may be the same storage as k, or a view k[..., :Dv]).
    length: int tensor on q's device, shape () or (B,): number of valid cached positions 0..length-1,
            the new token's at length-1 (written by the caller beforehand, or by this call: new_kv). Must be >= 1.
    scale: softmax scale.
    rope: None, or (cos, sin) tables of shape (>= L, Dk // 2) (rotate-half layout, as model.apply_rope:
          pairs (x[i], x[i + Dk/2])), read as rotations cos(p t_i) / sin(p t_i) as model.rope_cache builds them.
    rope_keys: how the cache holds keys when rope is given: 'as_read' (UNROTATED, key row p rotated by
          position p as it is read: the shared latent of Tucker / MLA, which is also the value) or 'stored'
          (rotated when written: only new_kv's key is rotated here, to position length-1, before it is stored).
    rotate_q: q arrives unrotated and is rotated here to position length-1 (needs rope).
    new_kv: None, or (k_new (B, nG, Dk), v_new (B, nG, Dv) or None): the new token's key and value, written
          into row length-1 of k and v by this call (no separate cache write), which then reads rows
          0..length-2 from the cache. v_new is None exactly when v is k's storage (shared KV: the value is
          the stored key's columns; its keys are then rotated as read, never stored rotated).
    nH % nG == 0; query head h uses KV head h // (nH // nG).
    pdl_split: launch the split kernel with programmatic dependent launch too (Hopper; unless PDL is False): its
          programs start while the kernel before it finishes. It pays after a short kernel and costs after a long
          one (H200, batch 1, 4k: after Tucker's G_q GEMV LLaMA-1B's Tucker [32,128,128] step -2.2%; after a wide QKV
          GEMV (PDL=True) GQA-8's step 6.4% slower, GPT-2 MHA's 10%: results/bench/LOG.md, session 52), so the
          caller, which knows the kernel before, chooses. The graph of launches stays valid either way.
    backend: 'auto' (Triton when q is on CUDA, triton imports and the shape is supported; else SDPA), 'triton', 'sdpa'.
    Returns (B, nH, Dv) in q's dtype.
    """
    length = _as_length(length, q)
    _check(q, k, v, length, rope, all_rows=rope_keys == "as_read")  # 'stored': only row length - 1 is read
    new_kv = _check_new(q, k, v, rope, rope_keys, rotate_q, new_kv)
    if _resolve(backend, q, k, v) == "sdpa":
        return _sdpa_decode(q, k, v, length, scale, rope, rope_keys=rope_keys, rotate_q=rotate_q, new_kv=new_kv)
    as_read = rope is not None and rope_keys == "as_read"
    return _launch(q, k, v, length, scale, rope if as_read else None, tables=rope, rotate_q=rotate_q,
                   rotate_new=rope is not None and rope_keys == "stored", new_kv=new_kv, pdl_split=pdl_split)


def _check_new(q, k, v, rope, rope_keys, rotate_q, new_kv):
    """decode_attention's rope_keys / rotate_q / new_kv arguments; returns new_kv in the caches' dtype."""
    if rope_keys not in ROPE_KEYS:
        raise ValueError(f"rope_keys must be one of {ROPE_KEYS}, got {rope_keys!r}")
    if rotate_q and rope is None:
        raise ValueError("rotate_q=True needs the rope tables")
    if new_kv is None:
        return None
    if not isinstance(new_kv, (tuple, list)) or len(new_kv) != 2:
        raise ValueError("new_kv must be a pair (k_new, v_new), v_new None for a shared key/value cache")
    k_new, v_new = new_kv
    B, nG, Dk, Dv = k.size(0), k.size(1), k.size(3), v.size(3)
    shared = _v_is_k(k, v)
    if not torch.is_tensor(k_new) or tuple(k_new.shape) != (B, nG, Dk):
        raise ValueError(f"new_kv's key must be (B, nG, Dk) = {(B, nG, Dk)}, got "
                         f"{tuple(k_new.shape) if torch.is_tensor(k_new) else type(k_new).__name__}")
    if shared != (v_new is None):
        raise ValueError("new_kv's value must be None exactly when v is k's storage (shared KV)")
    if v_new is not None and tuple(v_new.shape) != (B, nG, Dv):
        raise ValueError(f"new_kv's value must be (B, nG, Dv) = {(B, nG, Dv)}, got {tuple(v_new.shape)}")
    if shared and rope is not None and rope_keys == "stored":
        raise ValueError("a shared key/value cache keeps its keys unrotated (they are the values): rope_keys='as_read'")
    k_new = k_new.to(k.dtype)
    if k_new.stride(-1) != 1:
        k_new = k_new.contiguous()
    if v_new is not None:
        v_new = v_new.to(v.dtype)
        if v_new.stride(-1) != 1:
            v_new = v_new.contiguous()
    return k_new, v_new


def _tucker_unsupported(q_lat, G, k, v, G_post) -> Optional[str]:
    """Why the fused Tucker kernel cannot run (None when it can): the plain kernel's conditions on
    the (B, nH, r3) query it builds inside, plus the cores' dtype/device."""
    B, nH, r3 = q_lat.size(0), G.size(0), G.size(2)
    probe = q_lat.new_empty(()).expand(B, nH, r3)  # stands for q: device, dtype, heads, no data
    why = _unsupported(probe, k, v)
    if why is None and any(t.dtype != q_lat.dtype or t.device != q_lat.device for t in (G, G_post)):
        why = "G / G_post dtype or device differs from q_lat"
    if why is None and G_post.size(1) > MAX_HEAD_DIM:
        why = f"p2 = {G_post.size(1)} > {MAX_HEAD_DIM}"
    return why


def tucker_decode_backend(q_lat, G, k, v, G_post) -> str:
    """What backend='auto' picks for tucker_decode_attention: 'triton' (the fused kernel) on CUDA
    when it is supported, else 'sdpa' (the composition of torch ops around the SDPA fallback)."""
    if q_lat.device.type != "cuda":
        return "sdpa"
    return "triton" if _tucker_unsupported(q_lat, G, k, v, G_post) is None else "sdpa"


def tucker_decode_attention(q_lat, G, k, v, G_post, length, *, scale, rope=None, q_pos=None,
                            backend="auto") -> torch.Tensor:
    """Tucker decode step with the per-head cores fused: one new token per sequence.
    q_lat: (B, r2) the query latent x U2.     G: (nH, r2, r3) per-head query cores (C x1 U1).
    k: (B, 1, L, r3), v: (B, 1, L, p3) the latent caches (v may be k's storage: shared KV).
    G_post: (nH, p2, p3) per-head output cores (C~ x1 U~1).   length: as in decode_attention.
    rope: None or (cos, sin) (>= L, r3 // 2): keys rotated as read (as decode_attention), and the
          queries q_i = q_lat G_i rotated by position q_pos (int tensor () or (B,); default length - 1).
    Returns y_lat (B, p2) = sum_i o_i G_post_i^T, o_i = softmax(q_i k^T * scale) v, in q_lat's dtype.
    """
    length = _as_length(length, q_lat)
    if q_lat.dim() != 2 or G.dim() != 3 or G_post.dim() != 3 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("expected q_lat (B, r2), G (nH, r2, r3), k (B, 1, L, r3), v (B, 1, L, p3), G_post (nH, p2, p3)")
    B, r2 = q_lat.shape
    nH, r3 = G.size(0), G.size(2)
    if G.size(1) != r2 or k.size(1) != 1 or k.size(-1) != r3 or G_post.size(0) != nH or G_post.size(2) != v.size(-1):
        raise ValueError(f"shapes: q_lat {tuple(q_lat.shape)}, G {tuple(G.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}, G_post {tuple(G_post.shape)}")
    _check(q_lat.new_empty(()).expand(B, nH, r3), k, v, length, rope)
    if q_pos is not None:
        q_pos = _as_length(q_pos, q_lat)
        if q_pos.dtype not in (torch.int32, torch.int64) or q_pos.numel() not in (1, B):
            raise ValueError("q_pos must be an int32/int64 tensor of shape () or (B,)")
    if backend == "auto":
        backend = tucker_decode_backend(q_lat, G, k, v, G_post)
    elif backend == "triton":
        why = _tucker_unsupported(q_lat, G, k, v, G_post)
        if why is not None:
            raise ValueError(f"tucker_decode_attention backend='triton' cannot run: {why}")
    elif backend != "sdpa":
        raise ValueError(f"backend must be 'auto', 'triton' or 'sdpa', got {backend!r}")
    if backend == "triton":
        out = _empty((B, G_post.size(1)), q_lat.device, q_lat.dtype)
        return _launch(q_lat, k, v, length, scale, rope, G=G, G_post=G_post, q_pos=q_pos, out=out)
    return _tucker_compose(q_lat, G, k, v, G_post, length, scale=scale, rope=rope,
                           q_pos=length - 1 if q_pos is None else q_pos)


def _tucker_compose(q_lat, G, k, v, G_post, length, *, scale, rope, q_pos):
    """The same step as plain torch ops around the SDPA fallback (the reference and the fallback)."""
    B = q_lat.size(0)
    q = torch.einsum("bj,hjd->bhd", q_lat, G)  # (B, nH, r3): q_i = q_lat G_i
    if rope is not None:
        q = _at_positions(q, rope, q_pos.reshape(-1).expand(B))  # (B, nH, r3) at each sequence's new position
    o = _sdpa_decode(q, k, v, length, scale, rope)  # (B, nH, p3)
    return torch.einsum("bhd,hpd->bp", o, G_post)  # (B, p2): sum_i o_i G~_i^T

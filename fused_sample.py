"""
The sampled decode token in a few Triton kernels: top-k threshold, Gumbel-max draw and finiteness check.

model.sample_next draws the next token as the Gumbel-max form of torch.multinomial's draw over the top_k most
likely tokens: argmax over the kept ids of (logits - max) / temperature - log(q), q ~ Exp(1). As torch ops on an
H200 that took 67-75 us of GPU time a token at batch 1 against 12.6 us for greedy decoding (results/bench/session34):
an unsorted torch.topk of GPT-2's 50,257 bf16 logits is a chain of ~8 radix-select kernels (43 us), and each of
the other ~10 ops is a kernel of its own on one row (a one-row max with its index: 12.5 us). Here each row is cut
into blocks of BLOCK ids, one program a block in every kernel (so a row's work is spread over the GPU), the row's
partial results meeting in a small scratch tensor through atomics:

    1. radix select of the k-th largest logit, a byte a round (2 kernels for bf16 / fp16, 4 for fp32): every float
       mapped to an unsigned key in its order (nan above +inf, as torch.topk ranks it); round r adds each block's
       histogram of the keys' byte r, among the keys whose higher bytes are the k-th's (read off the rounds before:
       the largest byte with at least the remaining rank's count of keys at or above it), into the row's; round 0 also
       takes the row's maximum;
    2. the draw: over the ids with logit >= the k-th (torch's `logits < kth` mask, ties at the k-th value kept), the
       argmax of (x - m) * (1 / temperature) - log(q), with q from the caller (torch's exponential_ on the caller's
       generator, so the generator advances exactly as the torch form's), no fp contraction and libdevice's logf:
       the same float32 scores as the torch form's ops on CUDA bit for bit (torch divides by a scalar as a multiply
       by its float32 reciprocal), so the same token on every row the draw is valid for (a nan logit voids it in both
       forms, which may then name different ids). Each block's best (score, then the smaller id) is packed into one
       int64 and maxed into the row's; the row's last block to arrive writes the token (B,) long and sets `finite` (a
       bool scalar) False unless the row's max and the winning score are finite: the torch form's flag.

Without a top-k, step 1 is one kernel that takes the row's maximum only. A first version ran a row in one program
(every pass over the row by one SM): 123 us a draw, slower than the torch form (session 34 call 3).

Greedy decoding's token (temperature 0) is `argmax`: one kernel, each block's largest logit and its first id packed
into one int64 (the float's order key, then the smaller id) and maxed into the row's, the row's last block writing
the token: torch.argmax's answer (the first id of the maximum; -0 equal to +0; the first nan wins, as torch ranks
nan above every number), where torch's one-row reduction runs on one SM (12.4 us at batch 1, session 35).

`draw` and `argmax` are the entry points; `unsupported` says why the kernels cannot take a case (CPU without
TRITON_INTERPRET=1, no Triton, another dtype), and model.sample_next then runs the torch form.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from decode_attention import _interpret, _triton_available, device_problem

# Tuning knobs, read at call time.
# BLOCK: ids a program; None picks SMALL_BATCH_BLOCK up to SMALL_BATCH rows, else LARGE_BATCH_BLOCK. On an H200 at
# GPT-2's vocabulary (session 34 call 4) blocks of 256-2,048 took 16.0-19.6 us a draw at batch 1, and at batch 32
# blocks of 2,048 took 43.4 us against 49.9-76.9 for 256-1,024 (the byte histograms' cost grows with the rows)
BLOCK = None
SMALL_BATCH, SMALL_BATCH_BLOCK, LARGE_BATCH_BLOCK = 4, 512, 2048
NUM_WARPS = 4
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_HAVE_TRITON = _triton_available()  # once, at import

if _HAVE_TRITON:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    @triton.jit
    def _order_key(x, KEY_BITS: tl.constexpr):
        """x (float, its own dtype) -> unsigned keys in x's order as int64: a negative float's bits all flipped, a
        positive one's sign bit set; nan -> the largest key (torch.topk ranks nan above +inf)."""
        if KEY_BITS == 16:
            s = x.to(tl.int16, bitcast=True).to(tl.int64)  # sign-extended
            key = s ^ ((s >> 63) | 0x8000)  # negative: ~s (its upper bits cleared too); else s + 2^15
            key = tl.where(x != x, 0xFFFF, key)
        else:
            s = x.to(tl.int32, bitcast=True).to(tl.int64)
            key = s ^ ((s >> 63) | 0x80000000)
            key = tl.where(x != x, 0xFFFFFFFF, key)
        return key

    @triton.jit
    def _key_value(key, KEY_BITS: tl.constexpr, DTYPE: tl.constexpr):
        """_order_key's inverse: the key (int64 scalar) back to its float, as float32."""
        if KEY_BITS == 16:
            bits = tl.where(key >= 0x8000, key ^ 0x8000, ~key & 0xFFFF).to(tl.int16)
            value = bits.to(DTYPE, bitcast=True).to(tl.float32)
        else:
            bits = tl.where(key >= 0x80000000, key ^ 0x80000000, ~key & 0xFFFFFFFF).to(tl.int32)
            value = bits.to(tl.float32, bitcast=True)
        return value

    @triton.jit
    def _kth_prefix(S, k, ROUNDS: tl.constexpr):
        """From the row's first ROUNDS byte histograms in S: the top 8 * ROUNDS bits of the k-th largest key, and how
        many keys with those top bits are still to be passed over (1: the k-th itself is the largest of them)."""
        bins = tl.arange(0, 256)
        prefix = tl.zeros([], tl.int64)
        left = tl.zeros([], tl.int64) + k  # k may be a constexpr (the JIT makes an int argument of 1 one)
        for r in tl.static_range(ROUNDS):
            hist = tl.load(S + r * 256 + bins)  # (256,) keys with the prefix so far, by their next byte
            at_or_above = tl.cumsum(hist, axis=0, reverse=True)  # (256,) non-increasing in the byte
            digit = tl.sum((at_or_above >= left).to(tl.int64), axis=0) - 1  # the largest byte with >= left keys
            above = tl.sum(tl.where(bins == digit, at_or_above - hist, 0), axis=0)  # keys with a larger byte
            left = left - above
            prefix = (prefix << 8) | digit
        return prefix, left

    @triton.jit
    def _histogram_kernel(L, stride_l, S, stride_s, V, k, ROUND: tl.constexpr, KEY_BITS: tl.constexpr,
                          BLOCK: tl.constexpr, HISTOGRAM: tl.constexpr):
        """Round ROUND of the radix select, one block of a row a program: the histogram of the keys' byte ROUND
        (from the top) among the keys whose higher bytes are the k-th's (known from the rounds before), added into
        the row's S[ROUND]. Round 0 also takes the row's largest key into S[MAX]; without a top-k (HISTOGRAM
        False) that is all it does."""
        row, block = tl.program_id(0).to(tl.int64), tl.program_id(1)
        offs = block * BLOCK + tl.arange(0, BLOCK)
        valid = offs < V
        x = tl.load(L + row * stride_l + offs, mask=valid, other=0.0)
        key = _order_key(x, KEY_BITS)
        srow = S + row * stride_s
        shift: tl.constexpr = KEY_BITS - 8 * (ROUND + 1)
        if ROUND == 0:
            match = valid
            tl.atomic_max(srow + (KEY_BITS // 8) * 256, tl.max(tl.where(valid, key, 0), axis=0))
        else:
            prefix, _ = _kth_prefix(srow, k, ROUND)
            match = valid & ((key >> (shift + 8)) == prefix)
        if HISTOGRAM:
            hist = tl.histogram(((key >> shift) & 0xFF).to(tl.int32), 256, mask=match).to(tl.int64)  # (256,)
            tl.atomic_add(srow + ROUND * 256 + tl.arange(0, 256), hist, mask=hist > 0)

    @triton.jit
    def _draw_kernel(L, stride_l, Q, stride_q, S, stride_s, OUT, FINITE, SCORE, V, k, inv_t, PROGRAMS,
                     KEY_BITS: tl.constexpr, HAS_TOPK: tl.constexpr, BLOCK: tl.constexpr, EXACT_LOG: tl.constexpr,
                     WRITE_SCORE: tl.constexpr):
        """The draw, one block of a row a program: over the block's kept ids (logit >= the k-th largest), the best
        (x - m) * (1 / temperature) - log(q) and its id, packed (score key, then the smaller id) into one int64 and
        maxed into S[BEST]; the row's last program to arrive writes the token, clears the finite flag where the
        draw is void, and (WRITE_SCORE) the winning float32 score into SCORE."""
        row, block = tl.program_id(0).to(tl.int64), tl.program_id(1)
        ROUNDS: tl.constexpr = KEY_BITS // 8
        srow = S + row * stride_s
        max_key = tl.load(srow + ROUNDS * 256)
        row_max = _key_value(max_key, KEY_BITS, L.dtype.element_ty)  # nan where a logit is nan (its key the largest)
        offs = block * BLOCK + tl.arange(0, BLOCK)
        valid = offs < V
        x = tl.load(L + row * stride_l + offs, mask=valid, other=float("-inf")).to(tl.float32)
        keep = valid
        if HAS_TOPK:
            kth_key, _ = _kth_prefix(srow, k, ROUNDS)
            keep = valid & (x >= _key_value(kth_key, KEY_BITS, L.dtype.element_ty))  # torch: `logits < kth` (-0 == +0)
        q = tl.load(Q + row * stride_q + offs, mask=keep, other=1.0)
        if EXACT_LOG:  # libdevice's logf, torch's CUDA log (the interpreter has no libdevice)
            log_q = libdevice.log(q)
        else:
            log_q = tl.log(q)
        score = (x - row_max) * inv_t - log_q  # no contraction into an fma (enable_fp_fusion=False): torch's ops
        score = tl.where(keep, score, float("-inf"))
        best = tl.max(score, axis=0) + 0.0  # + 0.0: -0 -> +0, equal in torch's max (its first id wins), so in the key
        best_id = tl.min(tl.where(score == best, offs, V), axis=0)  # the first id on a tie; V if none (nan scores)
        best_id = tl.where(best_id < V, best_id, block * BLOCK)
        packed = (_order_key(best, 32) << 24) | (0xFFFFFF - best_id.to(tl.int64))  # > 0: zeros start the max
        tl.atomic_max(srow + ROUNDS * 256 + 1, packed)
        if tl.atomic_add(srow + ROUNDS * 256 + 2, 1) == PROGRAMS - 1:  # the row's last program (acq_rel atomics)
            won = tl.atomic_max(srow + ROUNDS * 256 + 1, 0)  # read after every program's max
            tl.store(OUT + row, 0xFFFFFF - (won & 0xFFFFFF))
            top = _key_value(won >> 24, 32, tl.float32)
            bad = (row_max != row_max) | (tl.abs(row_max) == float("inf")) | (top != top) | \
                (tl.abs(top) == float("inf"))
            tl.store(FINITE, tl.zeros([], tl.int8), mask=bad)
            if WRITE_SCORE:
                tl.store(SCORE + row, top)

    @triton.jit
    def _argmax_kernel(L, stride_l, S, stride_s, OUT, FINITE, V, PROGRAMS, KEY_BITS: tl.constexpr,
                       BLOCK: tl.constexpr):
        """Greedy decoding's token, one block of a row a program: the block's largest logit and its first id packed
        (order key, then the smaller id) into one int64 and maxed into S[0]; the row's last program to arrive (S[1]
        counts them) writes the row's token, and clears FINITE (int8) where the logit it chose is nan or +-inf."""
        row, block = tl.program_id(0).to(tl.int64), tl.program_id(1)
        offs = block * BLOCK + tl.arange(0, BLOCK)
        valid = offs < V
        x = tl.load(L + row * stride_l + offs, mask=valid, other=0.0)
        key = tl.where(x == 0, 1 << (KEY_BITS - 1), _order_key(x, KEY_BITS))  # -0 as +0 (torch: equal, first wins)
        packed = tl.where(valid, (key << 24) | (0xFFFFFF - offs.to(tl.int64)), 0)  # a valid id's > 0: keys are >= 1
        srow = S + row * stride_s
        tl.atomic_max(srow, tl.max(packed, axis=0))
        if tl.atomic_add(srow + 1, 1) == PROGRAMS - 1:  # the row's last program (acq_rel atomics)
            won = tl.atomic_max(srow, 0)  # read after every program's max
            tok = 0xFFFFFF - (won & 0xFFFFFF)
            tl.store(OUT + row, tok)
            best = tl.load(L + row * stride_l + tok).to(tl.float32)
            bad = (best != best) | (tl.abs(best) == float("inf"))  # nan (argmax's pick if any), or +-inf
            tl.store(FINITE, tl.zeros([], tl.int8), mask=bad)


def unsupported(logits: torch.Tensor) -> Optional[str]:
    """Why the kernel cannot draw from these logits now (None when it can)."""
    why = device_problem(logits.device, _interpret())
    if why:
        return why
    if not _HAVE_TRITON:
        return "triton is not installed"
    if logits.dtype not in DTYPES:
        return f"dtype {logits.dtype} (one of fp16/bf16/fp32)"
    if logits.dim() != 2 or logits.stride(-1) != 1:
        return "logits must be (B, vocab) with unit stride along the vocabulary"
    return None


def _blocks(B: int, V: int, caller: str):
    """(ids a program, programs a row) for B rows of V ids, after the checks both entry points share: at least one
    id, ids that fit the 24 bits the kernels pack them in, a row's blocks on the grid's second axis (at most 65,535;
    its rows go on the first). BLOCK, or the default for B rows."""
    if V < 1:
        raise ValueError(f"fused_sample.{caller}: logits with no ids to choose from")
    if V >= 1 << 24:
        raise ValueError(f"fused_sample.{caller}: a vocabulary of {V} ids; the kernel packs ids in 24 bits")
    block = BLOCK or (SMALL_BATCH_BLOCK if B <= SMALL_BATCH else LARGE_BATCH_BLOCK)
    programs = -(-V // block)
    if programs > 65535:
        raise ValueError(f"fused_sample.{caller}: {V:,} ids in blocks of {block} make {programs:,} programs a row (at "
                         "most 65,535): raise fused_sample.BLOCK")
    return block, programs


def argmax(logits: torch.Tensor, finite: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Greedy decoding's token (B,) long from logits (B, V) (a view with unit column stride is fine): torch.argmax
    along the ids, ties and nans included (the first id of the maximum; -0 and +0 equal; the first nan, if any).
    `finite` (a bool scalar on the same device), if given, is set False where a row's chosen logit is nan or +-inf
    (the sampled draw's flag: garbage logits are not decoded silently). Call unsupported(logits) first."""
    B, V = logits.shape
    block, programs = _blocks(B, V, "argmax")
    out = torch.empty(B, dtype=torch.long, device=logits.device)
    if B == 0:
        return out
    if finite is None:
        finite = torch.ones((), dtype=torch.bool, device=logits.device)
    elif finite.dtype != torch.bool or finite.numel() != 1:
        raise ValueError("fused_sample.argmax: finite must be a one-element bool tensor")
    scratch = torch.zeros(B, 2, dtype=torch.int64, device=logits.device)  # per row: the packed best, the arrivals
    _argmax_kernel[(B, programs)](logits, logits.stride(0), scratch, scratch.stride(0), out, finite.view(torch.int8),
                                  V, programs,
                                  KEY_BITS=32 if logits.dtype == torch.float32 else 16, BLOCK=block,
                                  num_warps=NUM_WARPS)
    return out


def inverse_temperature(temperature: float) -> float:
    """1 / temperature as torch's CUDA division by a scalar computes it: float32 1 over float32(temperature)."""
    return float(np.float32(1.0) / np.float32(temperature))


def draw(logits: torch.Tensor, q: torch.Tensor, temperature: float, top_k: Optional[int],
         finite: torch.Tensor, score_out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The token (B,) long from logits (B, V) (a view with unit column stride is fine) and noise q (B, V) float32,
    q ~ Exp(1): argmax over the top_k largest logits (all of them for None or top_k >= V) of (logits - max) /
    temperature - log(q). `finite` (bool scalar, same device) is set False when a row's max or winning score is
    not finite. score_out (B,) float32, if given, receives each row's winning score (for tests: the torch form's
    maximum, bit for bit). Call unsupported(logits) first."""
    B, V = logits.shape
    if q.shape != (B, V) or q.dtype != torch.float32 or q.stride(-1) != 1:
        raise ValueError(f"fused_sample.draw: q must be float32 {(B, V)} with unit column stride, got "
                         f"{q.dtype} {tuple(q.shape)}")
    if temperature <= 0:
        raise ValueError(f"fused_sample.draw: temperature={temperature} must be > 0 (temperature 0 is argmax)")
    if finite.dtype != torch.bool or finite.numel() != 1:
        raise ValueError("fused_sample.draw: finite must be a one-element bool tensor")
    if top_k is not None and top_k < 1:
        raise ValueError(f"fused_sample.draw: top_k={top_k} must be >= 1 (or None: every id)")
    if score_out is not None and (score_out.shape != (B,) or score_out.dtype != torch.float32):
        raise ValueError(f"fused_sample.draw: score_out must be float32 ({B},)")
    block, programs = _blocks(B, V, "draw")
    key_bits = 32 if logits.dtype == torch.float32 else 16
    rounds = key_bits // 8
    has_topk = top_k is not None and top_k < V
    k = top_k if has_topk else V
    out = torch.empty(B, dtype=torch.long, device=logits.device)
    if B == 0:
        return out
    # per row: the radix select's byte histograms (rounds x 256), the largest key, the packed best, the arrivals
    scratch = torch.zeros(B, rounds * 256 + 3, dtype=torch.int64, device=logits.device)
    grid = (B, programs)
    for r in range(rounds if has_topk else 1):  # without a top-k: round 0's row max alone
        _histogram_kernel[grid](logits, logits.stride(0), scratch, scratch.stride(0), V, k, ROUND=r, KEY_BITS=key_bits,
                                BLOCK=block, HISTOGRAM=has_topk, num_warps=NUM_WARPS)
    _draw_kernel[grid](logits, logits.stride(0), q, q.stride(0), scratch, scratch.stride(0), out,
                       finite.view(torch.int8), q if score_out is None else score_out, V, k,
                       inverse_temperature(temperature), programs, KEY_BITS=key_bits, HAS_TOPK=has_topk, BLOCK=block,
                       EXACT_LOG=not _interpret(), WRITE_SCORE=score_out is not None, num_warps=NUM_WARPS,
                       enable_fp_fusion=False)
    return out

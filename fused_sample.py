"""
The sampled decode token in one Triton kernel: top-k threshold, Gumbel-max draw and finiteness check.

model.sample_next draws the next token as the Gumbel-max form of torch.multinomial's draw over the top_k most
likely tokens: argmax over the kept ids of (logits - max) / temperature - log(q), q ~ Exp(1). As torch ops on an
H200 that took 67-73 us of GPU time a token at batch 1 against 12 us for greedy decoding (results/bench/session34):
an unsorted torch.topk of GPT-2's 50,257 bf16 logits is a chain of ~8 radix-select kernels (43 us), and each of
the other ~10 ops is a kernel of its own on one row (a one-row max with its index: 12.5 us). Here one program a
row does it all, reading the row from L2 a few times:

    1. the row's maximum m, and whether it holds a nan;
    2. the k-th largest logit t, by radix select on the logits' bits: each float mapped to an unsigned key in its
       order (16 bits for bf16 / fp16, 32 for fp32; nan above +inf, as torch.topk ranks it), the key built
       DIGIT_BITS bits at a time from the top, each step counting the row's keys at or above each of the
       2^DIGIT_BITS candidates (all in one pass over the row) and keeping the largest candidate with at least
       k of them (16 / DIGIT_BITS passes for 16-bit keys);
    3. the draw: over the ids with logit >= t (torch's `logits < kth` mask, ties at the k-th value kept),
       the argmax of (x - m) * (1 / temperature) - log(q), with q from the caller (torch's exponential_ on the
       caller's generator, so the generator advances exactly as the torch form's), no fp contraction and
       libdevice's logf: the same float32 scores as the torch form's ops on CUDA bit for bit (torch divides by a
       scalar as a multiply by its float32 reciprocal), so the same token;
    4. the token (B,) long, and `finite` (a bool scalar) and-ed with "the row's max and the winning score are
       finite and no logit is nan": the torch form's flag.

`draw` is the one entry point; `unsupported` says why the kernel cannot take a case (CPU without
TRITON_INTERPRET=1, no Triton, another dtype), and model.sample_next then runs the torch form.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from decode_attention import _interpret, _triton_available, device_problem

# Tuning knobs, read at call time.
BLOCK = 2048  # logits a program reads per loop step
NUM_WARPS = 8
DIGIT_BITS = 2  # key bits settled per counting pass: 2^DIGIT_BITS - 1 comparisons per logit per pass
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_HAVE_TRITON = _triton_available()  # once, at import

if _HAVE_TRITON:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    @triton.jit
    def _order_key(x, KEY_BITS: tl.constexpr):
        """x (float, its own dtype) -> unsigned keys in x's order as int32 (16-bit floats) or int64 (fp32): a
        negative float's bits all flipped, a positive one's sign bit set; nan -> the largest key."""
        if KEY_BITS == 16:
            s = x.to(tl.int16, bitcast=True).to(tl.int32)  # sign-extended
            key = s ^ ((s >> 31) | 0x8000)  # negative: ~s (its upper bits cleared too); else s + 2^15
            key = tl.where(x != x, 0xFFFF, key)
        else:
            s = x.to(tl.int32, bitcast=True).to(tl.int64)
            key = s ^ ((s >> 63) | 0x80000000)
            key = tl.where(x != x, 0xFFFFFFFF, key)
        return key

    @triton.jit
    def _topk_gumbel_kernel(L, stride_l, Q, stride_q, OUT, FINITE, V, k, inv_t,
                            KEY_BITS: tl.constexpr, HAS_TOPK: tl.constexpr, DIGIT_BITS: tl.constexpr,
                            BLOCK: tl.constexpr, EXACT_LOG: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        lrow = L + row * stride_l
        qrow = Q + row * stride_q
        cols = tl.arange(0, BLOCK)
        # 1. the row max (float32) and whether a nan is in the row
        run_max = tl.full([BLOCK], float("-inf"), tl.float32)
        nan_seen = tl.zeros([BLOCK], tl.int32)
        for start in range(0, V, BLOCK):
            offs = start + cols
            x = tl.load(lrow + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
            run_max = tl.maximum(run_max, x)
            nan_seen = nan_seen | (x != x).to(tl.int32)
        row_max = tl.max(run_max, axis=0)
        has_nan = tl.max(nan_seen, axis=0) > 0
        # 2. the k-th largest logit's key: kth = max{c : #(key >= c) >= k}, DIGIT_BITS bits a pass from the top
        kth_val = float("-inf")
        if HAS_TOPK:
            NCAND: tl.constexpr = 1 << DIGIT_BITS
            steps = tl.arange(0, NCAND)  # candidate digits 0 .. 2^DIGIT_BITS - 1
            if KEY_BITS == 16:
                kth = tl.zeros([], tl.int32)
                steps = steps.to(tl.int32)
            else:
                kth = tl.zeros([], tl.int64)
                steps = steps.to(tl.int64)
            for p in tl.static_range(KEY_BITS // DIGIT_BITS):
                shift = KEY_BITS - DIGIT_BITS * (p + 1)  # a constexpr: p is the static loop's
                cand = kth + (steps << shift)  # (NCAND,): digit 0 is kth itself, counted >= k by construction
                counts = tl.zeros([NCAND, BLOCK], tl.int32)
                for start in range(0, V, BLOCK):
                    offs = start + cols
                    x = tl.load(lrow + offs, mask=offs < V, other=0.0)
                    key = _order_key(x, KEY_BITS)
                    key = tl.where(offs < V, key, -1)  # past the row: below every candidate
                    counts += (key[None, :] >= cand[:, None]).to(tl.int32)  # (NCAND, BLOCK)
                total = tl.sum(counts, axis=1)  # (NCAND,) non-increasing in the digit
                digit = tl.sum((total >= k).to(kth.dtype), axis=0) - 1  # the largest digit with >= k keys
                kth = kth + (digit << shift)
            # the key back to its float: torch masks `logits < kth value`, a float comparison (-0 == +0)
            if KEY_BITS == 16:
                bits = tl.where(kth >= 0x8000, kth ^ 0x8000, ~kth & 0xFFFF).to(tl.int16)
                kth_val = bits.to(L.dtype.element_ty, bitcast=True).to(tl.float32)
            else:
                bits = tl.where(kth >= 0x80000000, kth ^ 0x80000000, ~kth & 0xFFFFFFFF).to(tl.int32)
                kth_val = bits.to(tl.float32, bitcast=True)
        # 3. the draw: argmax over the kept ids of (x - m) / T - log q, first index on a tie
        best = tl.full([BLOCK], float("-inf"), tl.float32)
        best_id = tl.zeros([BLOCK], tl.int32)
        for start in range(0, V, BLOCK):
            offs = start + cols
            valid = offs < V
            x = tl.load(lrow + offs, mask=valid, other=float("-inf")).to(tl.float32)
            keep = valid & (x >= kth_val)
            q = tl.load(qrow + offs, mask=keep, other=1.0)
            if EXACT_LOG:  # libdevice's logf, torch's CUDA log (the interpreter has no libdevice)
                log_q = libdevice.log(q)
            else:
                log_q = tl.log(q)
            score = (x - row_max) * inv_t - log_q
            score = tl.where(keep, score, float("-inf"))
            take = score > best  # a later lane only on a strictly larger score
            best = tl.where(take, score, best)
            best_id = tl.where(take, offs, best_id)
        top = tl.max(best, axis=0)
        token = tl.min(tl.where(best == top, best_id, V), axis=0)
        token = tl.where(token < V, token, 0)  # a nan row: any valid id (the flag says the draw is void)
        tl.store(OUT + row, token.to(tl.int64))
        # 4. the torch form's flag: its row max and its winning score finite (a nan logit makes both nan)
        bad = has_nan | (row_max != row_max) | (tl.abs(row_max) == float("inf")) | (top != top) | \
            (tl.abs(top) == float("inf"))
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


def inverse_temperature(temperature: float) -> float:
    """1 / temperature as torch's CUDA division by a scalar computes it: float32 1 over float32(temperature)."""
    return float(np.float32(1.0) / np.float32(temperature))


def draw(logits: torch.Tensor, q: torch.Tensor, temperature: float, top_k: Optional[int],
         finite: torch.Tensor) -> torch.Tensor:
    """The token (B,) long from logits (B, V) (a view with unit column stride is fine) and noise q (B, V) float32,
    q ~ Exp(1): argmax over the top_k largest logits (all of them for None or top_k >= V) of (logits - max) /
    temperature - log(q). `finite` (bool scalar, same device) is set False when a row's max or winning score is
    not finite. Call unsupported(logits) first."""
    B, V = logits.shape
    if q.shape != (B, V) or q.dtype != torch.float32 or q.stride(-1) != 1:
        raise ValueError(f"fused_sample.draw: q must be float32 {(B, V)} with unit column stride, got "
                         f"{q.dtype} {tuple(q.shape)}")
    if temperature <= 0:
        raise ValueError(f"fused_sample.draw: temperature={temperature} must be > 0 (temperature 0 is argmax)")
    if finite.dtype != torch.bool or finite.numel() != 1:
        raise ValueError("fused_sample.draw: finite must be a one-element bool tensor")
    out = torch.empty(B, dtype=torch.long, device=logits.device)
    has_topk = top_k is not None and top_k < V
    key_bits = 32 if logits.dtype == torch.float32 else 16
    digit_bits = DIGIT_BITS
    if key_bits % digit_bits:
        raise ValueError(f"fused_sample.DIGIT_BITS={digit_bits} must divide {key_bits}")
    _topk_gumbel_kernel[(B,)](logits, logits.stride(0), q, q.stride(0), out, finite.view(torch.int8), V,
                              top_k if has_topk else V, inverse_temperature(temperature),
                              KEY_BITS=key_bits, HAS_TOPK=has_topk, DIGIT_BITS=digit_bits, BLOCK=BLOCK,
                              EXACT_LOG=not _interpret(), num_warps=NUM_WARPS, enable_fp_fusion=False)
    return out

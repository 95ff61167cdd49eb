"""
Cross-entropy rows and their gradient in one pass over the logits, for the training loss head.

The loss is the last op of a training step, so its gradient with respect to the logits is known in the
forward: softmax(x) - onehot(t) per row (times the incoming scalar and 1/n, applied later to the much
smaller matmul outputs, model.LinearCrossEntropy). Computed there, the (tokens x vocab) logits are read
once and never kept for the backward. Per row of logits x (V wide) and target t (ignore_index -1):

    lse = log sum_j exp(x_j)          row_loss = lse - x_t          grad_j = exp(x_j - lse) - [j == t]

(row_loss and grad 0 for an ignored row; NaN loss for a target outside [-1, V), which F.cross_entropy
would reject). One Triton program per row: pass 1 keeps a running max and sum of exponentials block by
block (one exp per logit) and reads x_t; pass 2 reads the row again (from L2 where it is still there: a
GPT-2 row is 100 KB, and pass 1 marks its lines to be kept, L2_HINTS) and writes the gradient in the logits'
dtype, streamed past L2. On GPT-2's 12,288 x 50,304 bf16 logits that
replaces three kernels of the compiled step (forward log-sum-exp 0.66 ms, backward softmax - onehot 0.84 ms,
and a 0.36 ms zero fill of the logits' unused incoming gradient: results/bench/LOG.md, session 9).

`cross_entropy_rows` is the one dispatch point: the Triton kernel on CUDA (and on the CPU under
TRITON_INTERPRET=1, for tests), registered as a torch.library triton_op so that torch.compile keeps it
as one call; the same formula in torch ops everywhere else (backend='torch').
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from decode_attention import _interpret, _triton_available, device_problem, triton_ops_wanted

# Tuning knobs, read at call time (under torch.compile: when the step is traced).
BLOCK = 8192  # logits per step of a row's loop
NUM_WARPS = 8  # one row's program (H200 sweeps, results/bench/session9/loss_kernel*.md: 8 warps, 4k-8k blocks 0.87 ms
#               on GPT-2's logits, 16 warps 0.93-1.02, 32 warps 1.09-2.2)
L2_HINTS = True  # pass 1's loads marked evict_last (the row stays in L2 for pass 2), pass 2's loads evict_first and the
#                 gradient stored streaming (.cs): rows of 100 KB read twice and written once, ~1,000 of them in flight,
#                 more than L2 holds. H200 (results/bench/session13/loss_kernel_l2hints.md): 0.886 -> 0.810 ms on GPT-2's
#                 12288 x 50304 logits, 1.176 -> 1.078 ms on 16384 x 50304
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
BACKENDS = ("auto", "triton", "torch")
OP_NAME = "tucker_attention::cross_entropy_rows"
_HAVE_TRITON = _triton_available()  # once, at import: not a cached call inside a traced step
_OP = None  # the kernel's torch.library op, once register_ops has made it

if _HAVE_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def _cross_entropy_rows_kernel(X, T, Loss, G, V, s_x, s_g,
                                   BLOCK: tl.constexpr, WRITE_GRAD: tl.constexpr, L2_HINTS: tl.constexpr):
        LOG2E: tl.constexpr = 1.4426950408889634
        row = tl.program_id(0).to(tl.int64)
        x_row = X + row * s_x
        t = tl.load(T + row)
        offs = tl.arange(0, BLOCK)
        # pass 1: running max m and sum s of exp(x - m), in base 2 (exp2 is the hardware's exponential)
        m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), axis=0)
        s = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)
        for start in range(0, V, BLOCK):
            cols = start + offs
            if L2_HINTS:
                x = tl.load(x_row + cols, mask=cols < V, other=float("-inf"), eviction_policy="evict_last")
            else:
                x = tl.load(x_row + cols, mask=cols < V, other=float("-inf"))
            x = x.to(tl.float32) * LOG2E
            m_new = tl.maximum(m, tl.max(x, axis=0))
            # while every logit so far is -inf (a masked row start), shift by 0: exp2(-inf - -inf) would be NaN
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            s = s * tl.exp2(m - m_safe) + tl.sum(tl.exp2(x - m_safe), axis=0)
            m = m_new
        lse2 = m + tl.log2(s)  # log2 sum exp(x) = lse / ln 2
        valid = (t >= 0) & (t < V)
        x_t = tl.load(x_row + t, mask=valid, other=0.0).to(tl.float32)
        loss = tl.where(valid, lse2 / LOG2E - x_t, tl.where(t == -1, 0.0, float("nan")))
        tl.store(Loss + row, loss)
        if WRITE_GRAD:
            g_row = G + row * s_g
            for start in range(0, V, BLOCK):
                cols = start + offs
                mask = cols < V
                if L2_HINTS:
                    x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
                else:
                    x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
                g = tl.exp2(x * LOG2E - lse2) - tl.where(cols == t, 1.0, 0.0)
                g = tl.where(valid, g, 0.0)  # an ignored row's gradient is 0 (even where its logits are all -inf)
                if L2_HINTS:
                    tl.store(g_row + cols, g.to(G.dtype.element_ty), mask=mask, cache_modifier=".cs")
                else:
                    tl.store(g_row + cols, g.to(G.dtype.element_ty), mask=mask)

    def _cross_entropy_rows_impl(logits: torch.Tensor, targets: torch.Tensor,
                                 want_grad: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        M, V = logits.shape
        loss = torch.empty(M, device=logits.device, dtype=torch.float32)  # (M,)
        grad = torch.empty_like(logits) if want_grad else logits.new_empty(0)  # (M, V) or nothing
        torch.library.wrap_triton(_cross_entropy_rows_kernel)[(M,)](
            logits, targets, loss, grad if want_grad else loss, V, logits.stride(0), grad.stride(0) if want_grad else 0,
            BLOCK=BLOCK, WRITE_GRAD=want_grad, L2_HINTS=bool(L2_HINTS), num_warps=NUM_WARPS)
        return loss, grad


def register_ops() -> bool:
    """Register the kernel as a torch.library op (once) where a device can run it (triton_ops_wanted): at import,
    and by GPT.__init__ with the fused head, never while torch.compile traces a step (Dynamo refuses to trace
    triton_op's registration and would break the graph around the loss head). Once registered, torch.compile sees
    one call and the kernel inside it. Returns whether the op is there."""
    global _OP
    if _OP is None and _HAVE_TRITON and triton_ops_wanted(_interpret()):
        _OP = torch.library.triton_op(OP_NAME, _cross_entropy_rows_impl, mutates_args=())
    return _OP is not None


register_ops()


def _torch_rows(logits: torch.Tensor, targets: torch.Tensor, want_grad: bool):
    """The formula in torch ops, in at least float32 (the logits' dtype for the gradient)."""
    acc = torch.promote_types(logits.dtype, torch.float32)
    x = logits.to(acc)  # (M, V)
    V = x.size(1)
    valid = (targets >= 0) & (targets < V)
    safe = torch.where(valid, targets, torch.zeros_like(targets))
    lse = torch.logsumexp(x, dim=-1)  # (M,)
    picked = x.gather(1, safe[:, None]).squeeze(1)  # (M,)
    nan = torch.full_like(lse, float("nan"))
    loss = torch.where(valid, lse - picked, torch.where(targets == -1, torch.zeros_like(lse), nan))
    if not want_grad:
        return loss, None
    # (M, V) passes kept to three, in place (this is the CPU's loss head: no one-hot or masked copies of the
    # logits): the softmax, its target entry minus 1 (-0.0 added to an ignored row), ignored rows zeroed
    grad = torch.sub(x, lse[:, None]).exp_()  # (M, V) softmax
    grad.scatter_add_(1, safe[:, None], -valid[:, None].to(acc))
    grad.masked_fill_(~valid[:, None], 0.0)  # 0 for ignored rows, NaN-free
    return loss, grad.to(logits.dtype)


def unsupported(logits: torch.Tensor, targets: torch.Tensor) -> Optional[str]:
    """Why the Triton kernel cannot take these tensors now (None when it can)."""
    why = device_problem(logits.device, _interpret())
    if why:
        return why
    if not _HAVE_TRITON:
        return "triton is not installed"
    if logits.dim() != 2 or targets.shape != logits.shape[:1]:
        return f"shapes logits {tuple(logits.shape)}, targets {tuple(targets.shape)} (expected (M, V) and (M,))"
    if logits.dtype not in DTYPES:
        return f"logits dtype {logits.dtype} (one of fp16/bf16/fp32)"
    if logits.stride(1) != 1 or not targets.is_contiguous() or targets.device != logits.device:
        return "logits rows must be contiguous and targets a contiguous tensor on the logits' device"
    return None


def cross_entropy_rows(logits: torch.Tensor, targets: torch.Tensor, want_grad: bool,
                       backend: str = "auto") -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """logits (M, V), targets (M,) long (-1 = ignored) -> (row_loss (M,) float32 (float64 for float64 logits),
    grad (M, V) in the logits' dtype: softmax - onehot, 0 for ignored rows; None unless want_grad).
    backend 'auto': the Triton kernel where it can run (else the torch ops), 'triton': the kernel or an error,
    'torch': the torch ops."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {BACKENDS}")
    why = unsupported(logits, targets) if backend != "torch" else "backend='torch'"
    if why is not None:
        if backend == "triton":
            raise ValueError(f"cross_entropy_rows: the Triton kernel cannot run: {why}")
        return _torch_rows(logits, targets, want_grad)
    loss, grad = _OP(logits, targets, bool(want_grad))
    return loss, (grad if want_grad else None)

"""fused_mla_rope.decoupled_qk: MLA's decoupled-RoPE query [q_i | R q^R_i] and key [k_i | R k^R] for SDPA, built in
one Triton kernel forward and one backward.

Properties: the torch form scores every head as the paper's decoupled MLA does (q_i . k_i + R(t) q^R_i . R(s) k^R,
the rotary term a function of t - s only); the kernels equal it, values and gradients, at float32 rounding (fp16 at
its own) for odd head counts and widths, strided inputs (k with a row stride past its width, k^R a slice of the
stacked down-projection) and transposed incoming gradients (SDPA's), and sizes that leave a partial block of
tokens; a whole MLA model with the kernels equals it with torch ops, loss and every gradient; dispatch and errors;
the model traces as one graph with the two ops. CPU: the kernels through Triton's interpreter (tests/interpreted.py);
CUDA (skipped without a GPU): bf16, and a compiled model's step.
"""
import math

import pytest
import torch

import fused_mla_rope as fm
from interpreted import needs_child
from model import GPT, GPTConfig, apply_rope, rope_cache
from tiny import compiled_step_kernels, traced_functions_by_backend

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


def inputs(B=2, T=7, nH=3, dH=12, dR=6, dtype=torch.float32, device="cpu", start=5, seed=0):
    """q (B, T, nH, dH + dR) contiguous; k a (B, T, nH, dH) view with a row stride of 2 nH dH (general strides);
    k_rope a column slice (from column 3) of a wider (B, T, dR + 14) tensor; cos, sin of positions start .. start + T
    - 1."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)
    cos, sin = rope_cache(dR, start + T + 1, 10000.0, device=device)
    leaves = [rnd(B, T, nH, dH + dR), rnd(B, T, 2 * nH * dH), rnd(B, T, dR + 14)]
    return leaves, cos[start:start + T], sin[start:start + T]


def views(leaves, nH, dH, dR):
    q, kv, wide = leaves
    B, T = q.shape[:2]
    return q, kv[..., :nH * dH].view(B, T, nH, dH), wide[..., 3:3 + dR]


def run(backend, leaves, cos, sin, nH, dH, dR, grads):
    """Q, K and the leaves' gradients for incoming gradients grads."""
    leaves = [x.detach().clone().requires_grad_() for x in leaves]
    Q, K = fm.decoupled_qk(*views(leaves, nH, dH, dR), cos, sin, backend=backend)
    torch.autograd.backward([Q, K], list(grads))
    return Q.detach(), K.detach(), [x.grad for x in leaves]


def test_torch_form_scores_heads_as_decoupled_mla():
    """Q_i . K_i over positions t, s equals q_i . k_i + R(t) q^R_i . R(s) k^R with model.apply_rope, and the rotary
    term depends on t - s only (the same vectors at every position give a Toeplitz matrix)."""
    B, T, nH, dH, dR = 1, 6, 2, 4, 8
    cos, sin = rope_cache(dR, T, 10000.0)
    torch.manual_seed(0)
    q_c, q_r, k = torch.randn(B, T, nH, dH), torch.randn(B, T, nH, dR), torch.randn(B, T, nH, dH)
    k_r = torch.randn(B, T, dR)
    Q, K = fm.decoupled_qk(torch.cat((q_c, q_r), -1), k, k_r, cos, sin, backend="torch")
    scores = torch.einsum("bthd,bshd->bhts", Q, K)
    ref = (torch.einsum("bthd,bshd->bhts", q_c, k)
           + torch.einsum("bthd,bsd->bhts", apply_rope(q_r, cos[:, None], sin[:, None]), apply_rope(k_r, cos, sin)))
    torch.testing.assert_close(scores, ref)
    same_q, same_k = q_r[:, :1].expand(B, T, nH, dR), k_r[:, :1].expand(B, T, dR)
    rot = torch.einsum("bthd,bsd->bhts", apply_rope(same_q, cos[:, None], sin[:, None]), apply_rope(same_k, cos, sin))
    for off in range(-T + 1, T):
        diag = rot[0, 0].diagonal(off)
        torch.testing.assert_close(diag, diag[:1].expand_as(diag), atol=1e-5, rtol=1e-5)


def test_dispatch_and_errors(monkeypatch):
    leaves, cos, sin = inputs()
    q, k, k_rope = views(leaves, 3, 12, 6)
    with pytest.raises(ValueError, match="backend='bogus'"):
        fm.decoupled_qk(q, k, k_rope, cos, sin, backend="bogus")
    with pytest.raises(ValueError, match="q .* must be"):
        fm.decoupled_qk(q[..., :-1], k, k_rope, cos, sin)
    with pytest.raises(ValueError, match="cos / sin"):
        fm.decoupled_qk(q, k, k_rope, cos[:-1], sin[:-1])
    with pytest.raises(ValueError, match="k_rope"):
        fm.decoupled_qk(q, k, k_rope[0], cos, sin)
    with pytest.raises(ValueError, match="dR even"):  # an odd rotary width has no rotate-half pairs
        fm.decoupled_qk(q[..., :-1], k, k_rope[..., :-1], cos[:, :2], sin[:, :2], backend="torch")
    monkeypatch.setattr(fm, "_interpret", lambda: False)  # the CPU without the interpreter
    with pytest.raises(ValueError, match="cannot run: device cpu"):
        fm.decoupled_qk(q, k, k_rope, cos, sin, backend="triton")
    a, b = fm.decoupled_qk(q, k, k_rope, cos, sin), fm.decoupled_qk_torch(q, k, k_rope, cos, sin)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    monkeypatch.setattr(fm, "BACKEND", "bogus")
    with pytest.raises(ValueError, match="backend='bogus'"):
        fm.decoupled_qk(q, k, k_rope, cos, sin)


def test_unsupported_names_why(monkeypatch):
    monkeypatch.setattr(fm, "_interpret", lambda: True)  # the CPU counts as a Triton device, as in the child
    leaves, cos, sin = inputs()
    q, k, k_rope = views(leaves, 3, 12, 6)
    if fm._HAVE_TRITON:
        assert fm.unsupported(q, k, k_rope, cos, sin) is None
        assert "dtypes" in fm.unsupported(q, k.double(), k_rope, cos, sin)
        assert "last dim" in fm.unsupported(q.transpose(2, 3).contiguous().transpose(2, 3), k, k_rope, cos, sin)
        assert "contiguous" in fm.unsupported(q, k, k_rope, cos.t().contiguous().t(), sin)
        strided_rope = torch.randn(2, 7, 12)[..., ::2]  # k_rope's columns at stride 2
        assert "last dim" in fm.unsupported(q, k, strided_rope, cos, sin)
        assert "all must be one" in fm.unsupported(q, k, k_rope, cos.to("meta"), sin.to("meta"))  # tables elsewhere
    monkeypatch.setattr(fm, "_interpret", lambda: False)
    assert "device cpu" in fm.unsupported(q, k, k_rope, cos, sin)


def test_dense_layouts_rotated_in_place():
    """The compiled backward rotates dQ where it lies only in a layout whose elements are each stored once: contiguous
    or SDPA's transposed one (dims of size 1 with any stride); a slice, a strided last dim, an expanded (overlapping)
    tensor or another permutation is rotated in a copy."""
    x = torch.zeros(2, 5, 3, 8)
    assert fm._dense(x) and fm._dense(torch.zeros(2, 3, 5, 8).transpose(1, 2))
    assert fm._dense(torch.zeros(1, 5, 3, 8).as_strided((1, 5, 3, 8), (7, 24, 8, 1)))  # B = 1: its stride is moot
    assert not fm._dense(torch.zeros(2, 5, 3, 10)[..., :8])  # rows past the width
    assert not fm._dense(torch.zeros(2, 5, 3, 16)[..., ::2])
    assert not fm._dense(torch.zeros(2, 1, 3, 8).expand(2, 5, 3, 8))  # every token the same storage
    assert not fm._dense(torch.zeros(5, 2, 3, 8).transpose(0, 1))


def test_mla_rope_kernels_key_is_checked():
    """The model's key names itself and its allowed values; 'torch' and 'auto' both build."""
    with pytest.raises(ValueError, match=r"mla_rope_kernels='triton' is unknown: allowed \('auto', 'torch'\)"):
        mla_config(mla_rope_kernels="triton")
    assert GPT(mla_config(mla_rope_kernels="torch")).transformer.h[0].attn.qk_backend == "torch"
    assert GPT(mla_config()).transformer.h[0].attn.qk_backend is None  # fused_mla_rope.BACKEND decides


def mla_config(**kw):
    return GPTConfig(**{**dict(n_layer=2, n_head=3, n_embd=48, block_size=16, vocab_size=97, bias=True, attn="mla",
                               q_rank=24, kv_rank=16, pos_emb="rope", mla_rope="decoupled"), **kw})


@pytest.mark.parametrize("q_in_place,k_up", [(False, False), (True, False), (False, True)])
def test_model_is_one_traced_graph_with_the_ops(q_in_place, k_up, monkeypatch):
    """With the kernels chosen, torch.compile still traces MLA's training forward as one graph (torch._dynamo.export
    fails on a graph break): one more autograd function a layer than with torch ops, two with q_in_place or
    K_UP_IN_KERNEL (the query's rotation in place and the key)."""
    monkeypatch.setattr(fm, "Q_IN_PLACE", q_in_place)
    monkeypatch.setattr(fm, "K_UP_IN_KERNEL", k_up)

    def build(backend):
        monkeypatch.setattr(fm, "BACKEND", backend)
        return GPT(mla_config(gelu="torch"))

    functions = traced_functions_by_backend(monkeypatch, fm, build, torch.randint(0, 97, (2, 16)))
    assert functions["auto"] - functions["torch"] == (4 if q_in_place or k_up else 2)  # two layers


# ----------------------------------------------------------------------------------------
# The kernels through Triton's interpreter (tests/test_interpreted.py runs these in its child process)


@needs_child
@pytest.mark.parametrize("shape", [(2, 7, 3, 12, 6), (1, 9, 4, 16, 8), (3, 1, 1, 5, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_interp_kernels_match_torch_form(shape, dtype, monkeypatch):
    """Values and gradients against decoupled_qk_torch (in float32 for fp16: the kernels round once, eager ops each
    step), 4 tokens a program (7, 9 and 2 tokens: partial blocks); the incoming gradient of Q transposed as SDPA's."""
    monkeypatch.setattr(fm, "ROWS", 4)
    B, T, nH, dH, dR = shape
    leaves, cos, sin = inputs(B, T, nH, dH, dR, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    gq = torch.randn(B, nH, T, dH + dR, generator=g).to(dtype).transpose(1, 2)  # (B, T, nH, W), not contiguous
    gk = torch.randn(B, T, nH, dH + dR, generator=g).to(dtype)
    Qa, Ka, grads_a = run("triton", leaves, cos, sin, nH, dH, dR, (gq, gk))
    # the torch form in float32 (from the tables as the kernels round them: to q's dtype first)
    tables = [t.to(dtype).float() for t in (cos, sin)]
    Qb, Kb, grads_b = run("torch", [x.float() for x in leaves], *tables, nH, dH, dR, (gq.float(), gk.float()))
    assert Qa.dtype == dtype and Qa.is_contiguous() and Ka.is_contiguous() and Qa.shape == (B, T, nH, dH + dR)
    tol = dict(atol=1e-6, rtol=1e-6) if dtype == torch.float32 else dict(atol=2e-3, rtol=1e-3)
    torch.testing.assert_close(Qa.float(), Qb, **tol)
    torch.testing.assert_close(Ka.float(), Kb, **tol)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a.float(), b, **tol)
    assert grads_a[2][..., :3].abs().max() == 0 and grads_a[2][..., 3 + dR:].abs().max() == 0  # k^R's slice only


@needs_child
@pytest.mark.parametrize("case", ["k_transposed", "last_dim_strided", "only_q_used", "only_k_used"])
def test_interp_backward_gradient_layouts_and_unused_outputs(case):
    """The backward's other inputs: dK transposed as SDPA's; a gradient whose last dim is not contiguous (copied
    first); one output unused (autograd hands the Function None or zeros for its gradient: either way the unused
    output's share of each gradient is zero, k's and k^R's wholly when K is unused; torch ops leave them None)."""
    B, T, nH, dH, dR = 2, 5, 3, 12, 6
    leaves, cos, sin = inputs(B, T, nH, dH, dR)
    g = torch.Generator().manual_seed(2)
    gq = torch.randn(B, T, nH, dH + dR, generator=g)
    gk = torch.randn(B, nH, T, dH + dR, generator=g).transpose(1, 2)  # SDPA's layout
    if case == "last_dim_strided":
        gq = torch.randn(B, T, nH, 2 * (dH + dR), generator=g)[..., ::2]  # stride 2 in the last dim
    out = {}
    for backend in ("triton", "torch"):
        xs = [x.detach().clone().requires_grad_() for x in leaves]
        Q, K = fm.decoupled_qk(*views(xs, nH, dH, dR), cos, sin, backend=backend)
        if case == "only_q_used":
            (Q * gq).sum().backward()
        elif case == "only_k_used":
            (K * gk).sum().backward()
        else:
            torch.autograd.backward([Q, K], [gq, gk])
        out[backend] = [x.grad if x.grad is not None else torch.zeros_like(x) for x in xs]  # torch: None, no path
    for a, b in zip(out["triton"], out["torch"]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    if case == "only_q_used":
        assert out["triton"][1].abs().max() == 0 and out["triton"][2].abs().max() == 0  # no gradient for k, k^R


@needs_child
@pytest.mark.parametrize("case", ["contiguous", "strided_q", "last_dim_strided_gradient", "only_q_used"])
def test_interp_q_in_place_matches_torch_form(case):
    """q_in_place: Q is q itself, its content columns untouched and its rotary ones rotated; values and gradients
    equal the torch form's at float32 rounding (here exactly: the same float32 products); q a view with row and head
    strides past its width; the incoming gradient of Q transposed (SDPA's) or with a strided last dim; the gradient
    autograd hands over is left as it was (eager: the backward rotates a copy)."""
    B, T, nH, dH, dR = 2, 5, 3, 12, 6
    leaves, cos, sin = inputs(B, T, nH, dH, dR)
    g = torch.Generator().manual_seed(3)
    gq = torch.randn(B, nH, T, dH + dR, generator=g).transpose(1, 2)  # SDPA's layout
    if case == "last_dim_strided_gradient":
        gq = torch.randn(B, T, nH, 2 * (dH + dR), generator=g)[..., ::2]
    gk = torch.randn(B, T, nH, dH + dR, generator=g)
    gq_before = gq.clone()
    out = {}
    for backend in ("triton", "torch"):
        xs = [x.detach().clone().requires_grad_() for x in leaves]
        q, k, k_rope = views(xs, nH, dH, dR)
        if case == "strided_q":  # q (B, T, nH, W) inside a (B, T, nH + 1, W + 4) buffer
            q = torch.nn.functional.pad(q, (0, 4, 0, 1))[:, :, :nH, :dH + dR]
        else:
            q = q * 1  # not a leaf (the model's up-projection output)
        content = q[..., :dH].detach().clone()
        Q, K = fm.decoupled_qk(q, k, k_rope, cos, sin, backend=backend, q_in_place=True)
        if backend == "triton":
            assert Q is q and torch.equal(Q[..., :dH], content)
        if case == "only_q_used":
            (Q * gq).sum().backward()
        else:
            torch.autograd.backward([Q, K], [gq, gk])
        out[backend] = [Q.detach(), K.detach()] + [x.grad if x.grad is not None else torch.zeros_like(x) for x in xs]
    assert torch.equal(gq, gq_before)
    for a, b in zip(out["triton"], out["torch"]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@needs_child
def test_interp_batch_strides_not_token_multiples():
    """The kernels read their inputs by batch, token and head strides, not as flat token rows: q, the latent c_K and
    k^R views into (B, T + 1, ...) buffers (their batch stride not T times their token stride; `inputs` and
    `latent_inputs` make only such multiples), through the copying forward and through K_UP_IN_KERNEL's; Q, K and
    every gradient against the torch form."""
    B, T, nH, dH, dR, dc = 2, 5, 3, 12, 6, 20
    g = torch.Generator().manual_seed(6)
    leaves, cos, sin = inputs(B, T, nH, dH, dR)
    leaves[0] = torch.randn(B, T + 1, nH + 1, dH + dR + 4, generator=g)  # q = [:, :T, :nH, :dH + dR]
    wide = torch.randn(B, T + 1, dc + dR + 5, generator=g)  # c_K = [:, :T, 2:2 + dc], k^R the next dR columns
    w = torch.randn(nH * dH, dc, generator=g) / dc ** 0.5
    gq, gk = torch.randn(2, B, T, nH, dH + dR, generator=g)
    out = {}
    for backend in ("triton", "torch"):
        xs = [x.detach().clone().requires_grad_() for x in leaves + [wide, w]]
        q, k, k_rope = views([xs[0][:, :T, :nH, :dH + dR]] + xs[1:3], nH, dH, dR)
        Q, K = fm.decoupled_qk(q, k, k_rope, cos, sin, backend=backend)
        c_k, k_rope2 = xs[3][:, :T, 2:2 + dc], xs[3][:, :T, 2 + dc:2 + dc + dR]
        Q2, K2 = fm.decoupled_qk_from_latent(q * 1, c_k, xs[4], None, k_rope2, cos, sin, backend=backend)
        torch.autograd.backward([Q, K, Q2, K2], [gq, gk, gq, gk])
        out[backend] = [Q.detach(), K.detach(), Q2.detach(), K2.detach()] + [x.grad for x in xs]
    for a, b in zip(out["triton"], out["torch"]):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)


@needs_child
def test_interp_fp16_rounded_once_from_float32():
    """fp16: Q, K and every gradient are the float32 form's (from the tables rounded to fp16 first, as apply_rope's
    .to(x.dtype)) rounded once, within one fp16 spacing: the tables rounded before use, not kept in float32 (their
    rounding shows where the rotation cancels), and dK^R's heads summed in float32 (one head's dK^R ~ +1000, another's
    ~ -1000: an fp16 sum loses the rest, spacing 0.5 there)."""
    B, T, nH, dH, dR = 1, 4, 4, 8, 8
    leaves, cos, sin = inputs(B, T, nH, dH, dR, dtype=torch.float16)
    g = torch.Generator().manual_seed(7)
    gq = torch.randn(B, T, nH, dH + dR, generator=g).half()
    gk = torch.randn(B, T, nH, dH + dR, generator=g)
    gk[:, :, 0, dH:] += 1000.0
    gk[:, :, nH - 1, dH:] -= 1000.0
    gk = gk.half()
    got = run("triton", leaves, cos, sin, nH, dH, dR, (gq, gk))
    tables = [t.half().float() for t in (cos, sin)]
    want = run("torch", [x.float() for x in leaves], *tables, nH, dH, dR, (gq.float(), gk.float()))
    for a, b in zip([got[0], got[1], *got[2]], [want[0], want[1], *want[2]]):
        spacing = torch.finfo(torch.float16).eps * b.abs().clamp_min(2.0 ** -14)  # fp16's spacing at b (or less)
        assert a.dtype == torch.float16 and ((a.float() - b).abs() <= spacing).all()


def latent_inputs(B, T, nH, dH, dR, dc, bias, dtype, seed=4):
    """decoupled_qk_from_latent's leaves: q; the latent c_K and k^R column slices of one wider tensor (the stacked
    down-projection's output); k_up's weight (nH dH, dc) and bias; cos, sin."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g).to(dtype)
    cos, sin = rope_cache(dR, T + 3, 10000.0)
    leaves = [rnd(B, T, nH, dH + dR), rnd(B, T, dc + dR + 5), rnd(nH * dH, dc) / dc ** 0.5]
    leaves += [rnd(nH * dH)] if bias else []
    return leaves, cos[3:].contiguous(), sin[3:].contiguous()


def run_latent(backend, leaves, cos, sin, dH, dR, dc, grads):
    xs = [x.detach().clone().requires_grad_() for x in leaves]
    q, wide, w = xs[:3]
    Q, K = fm.decoupled_qk_from_latent(q * 1, wide[..., 2:2 + dc], w, xs[3] if len(xs) > 3 else None,
                                       wide[..., 2 + dc:2 + dc + dR], cos, sin, backend=backend)
    torch.autograd.backward([Q, K], list(grads))
    return [Q.detach(), K.detach()] + [x.grad for x in xs]


@needs_child
@pytest.mark.parametrize("shape", [(2, 70, 3, 12, 6, 20), (1, 5, 4, 16, 8, 16), (2, 64, 2, 64, 32, 128)])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_interp_from_latent_matches_torch_form(shape, bias, dtype):
    """K_UP_IN_KERNEL's path: Q, K and every gradient (q, the latent and k^R through their shared wider tensor, k_up's
    weight and bias) against F.linear then the torch form, for widths that are not powers of two (dc 20, dH 12), a
    partial block of tokens (70 = 64 + 6, 5) and GPT-2's widths; fp16 against the float32 form."""
    B, T, nH, dH, dR, dc = shape
    leaves, cos, sin = latent_inputs(B, T, nH, dH, dR, dc, bias, dtype)
    g = torch.Generator().manual_seed(5)
    gq = torch.randn(B, nH, T, dH + dR, generator=g).to(dtype).transpose(1, 2)
    gk = torch.randn(B, nH, T, dH + dR, generator=g).to(dtype).transpose(1, 2)
    a = run_latent("triton", leaves, cos[:T], sin[:T], dH, dR, dc, (gq, gk))
    tables = [t[:T].to(dtype).float() for t in (cos, sin)]
    b = run_latent("torch", [x.float() for x in leaves], *tables, dH, dR, dc, (gq.float(), gk.float()))
    tol = dict(atol=2e-5, rtol=2e-5) if dtype == torch.float32 else dict(atol=4e-3, rtol=2e-3)
    for x, y in zip(a, b):
        torch.testing.assert_close(x.float(), y, **tol)


H200_PROGRAM, A100_PROGRAM, SM86_PROGRAM = 232448, 166912, 101376  # shared memory a program may take at most


@pytest.mark.parametrize("dc, dh, itemsize, limit, want", [
    (128, 64, 2, H200_PROGRAM, (64, 3)), (128, 64, 4, H200_PROGRAM, (64, 3)), (128, 64, 4, A100_PROGRAM, (64, 3)),
    (128, 64, 2, SM86_PROGRAM, (64, 3)), (128, 64, 4, 120 * 1024, (64, 2)), (128, 64, 4, SM86_PROGRAM, None),
    (64, 64, 4, SM86_PROGRAM, (64, 3)), (256, 64, 2, H200_PROGRAM, None), (512, 128, 2, H200_PROGRAM, None),
    (512, 64, 2, None, None), (128, 64, 4, None, (64, 3))])
def test_k_up_launch_fits_the_devices_shared_memory(dc, dh, itemsize, limit, want):
    """k_up_launch: K_UP_ROWS at 3 stages where it fits (GPT-2 MLA's latent of 128 in bf16 on any GPU, in float32 on
    an H200 or A100), at 2 on a GPU between, else (float32 on a GPU of 100 KB an SM) k_up's matmul; the matmul too for
    any latent wider than K_UP_MAX_LATENT, where it is the faster, whatever the limit (none in the interpreter). Each
    choice within the limit, the one before it beyond."""
    assert fm.k_up_ladder() == [(64, 3), (64, 2)] and fm.K_UP_MAX_LATENT == 128
    got = fm.k_up_launch(dc, dh, itemsize, limit)
    assert got == want
    if limit is not None and dc <= fm.K_UP_MAX_LATENT:
        ladder = fm.k_up_ladder()
        tried = ladder[:ladder.index(got) if got else len(ladder)]
        assert all(fm.k_up_shared_bytes(r, s, dc, dh, itemsize) > limit for r, s in tried)
        assert got is None or fm.k_up_shared_bytes(*got, dc, dh, itemsize) <= limit


@pytest.mark.parametrize("dc, dh, itemsize, want", [(128, 64, 2, (64, 3)), (128, 64, 4, (64, 3)),
                                                     (128, 128, 2, None), (256, 64, 2, None)])
def test_k_up_launch_before_ampere_sizes_one_float32_step(dc, dh, itemsize, want):
    """Below sm_80 (pipelined=False: Triton buffers one step, the operands as float32) k_up_launch sizes by
    (rows + heads) x latent x 4 bytes whatever the dtype and stages: GPT-2 MLA's latent of 128 fills a T4's 64 KB a
    program exactly (65,536 B, sm_75's compile: tests/test_kernels_compile.py), heads of 128 do not fit. The pipelined
    bound over-states the first (80 KB at 3 stages) and under-states a latent of 256 (112 KB against 128 KB); wider
    latents than K_UP_MAX_LATENT take the matmul, as anywhere."""
    t4_program = 64 * 1024
    assert fm.k_up_launch(dc, dh, itemsize, t4_program, False) == want
    assert fm.k_up_shared_bytes(64, 3, 128, 64, 2, pipelined=False) == 65536 < fm.k_up_shared_bytes(64, 3, 128, 64, 2)
    assert fm.k_up_shared_bytes(64, 2, 256, 64, 2, pipelined=False) == 131072 > fm.k_up_shared_bytes(64, 2, 256, 64, 2)


@needs_child
@pytest.mark.parametrize("launch", [(16, 1), (32, 2), None])
def test_interp_from_latent_at_every_launch_and_by_the_matmul(launch, monkeypatch):
    """K_UP_IN_KERNEL's key, values and gradients equal to the torch form with the kernel at other rows a program and
    stages than K_UP_ROWS and 3 (K_UP_ROWS is a setting, 2 stages k_up_launch's second choice), and by k_up's matmul
    then the K kernel, k_up_launch's None (the kernel's launch then never made)."""
    monkeypatch.setattr(fm, "k_up_launch", lambda dc, dh, itemsize, limit, pipelined=True: launch)
    B, T, nH, dH, dR, dc = 2, 70, 3, 12, 6, 20
    leaves, cos, sin = latent_inputs(B, T, nH, dH, dR, dc, True, torch.float32)
    g = torch.Generator().manual_seed(5)
    gq = torch.randn(B, nH, T, dH + dR, generator=g).transpose(1, 2)
    gk = torch.randn(B, T, nH, dH + dR, generator=g)
    if launch is None:
        monkeypatch.setattr(fm, "_k_up_fwd_kernel", None)  # any launch of it would fail
    a = run_latent("triton", leaves, cos[:T], sin[:T], dH, dR, dc, (gq, gk))
    b = run_latent("torch", leaves, cos[:T], sin[:T], dH, dR, dc, (gq, gk))
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=2e-5, rtol=2e-5)


def test_from_latent_dispatch_and_errors(monkeypatch):
    leaves, cos, sin = latent_inputs(2, 5, 3, 12, 6, 20, True, torch.float32)
    q, wide, w, bias = leaves
    c_k, k_rope = wide[..., 2:22], wide[..., 22:28]
    with pytest.raises(ValueError, match="k_weight \\(35, 20\\) \\(nH dH, dc\\) = \\(36, dc\\)"):
        fm.decoupled_qk_from_latent(q, c_k, w[:-1], bias, k_rope, cos[:5], sin[:5])
    for backend in ("auto", "torch"):  # another dtype is refused on every path (F.linear would fail without autocast)
        with pytest.raises(ValueError, match="k_weight is torch.float64"):
            fm.decoupled_qk_from_latent(q, c_k, w.double(), bias, k_rope, cos[:5], sin[:5], backend=backend)
    with pytest.raises(ValueError, match="k_bias"):
        fm.decoupled_qk_from_latent(q, c_k, w, bias[:-1], k_rope, cos[:5], sin[:5])
    with pytest.raises(ValueError, match=r"c_k \(5, 2, 20\) must be \(B, T, dc\) = \(2, 5, dc\)"):  # (T, B, dc)
        fm.decoupled_qk_from_latent(q, c_k.transpose(0, 1), w, bias, k_rope, cos[:5], sin[:5])
    with pytest.raises(ValueError, match="backend='bogus'"):
        fm.decoupled_qk_from_latent(q, c_k, w, bias, k_rope, cos[:5], sin[:5], backend="bogus")
    with pytest.raises(ValueError, match="q \\(B, T, nH"):
        fm.decoupled_qk_from_latent(q[0], c_k, w, bias, k_rope, cos[:5], sin[:5])
    monkeypatch.setattr(fm, "_interpret", lambda: True)  # the CPU counts as a Triton device
    strided_bias = bias.repeat_interleave(2)[::2]  # bias's values at stride 2
    if fm._HAVE_TRITON:  # the kernel reads the bias at unit stride, so 'triton' refuses a strided one
        with pytest.raises(ValueError, match="must be contiguous"):
            fm.decoupled_qk_from_latent(q, c_k, w, strided_bias, k_rope, cos[:5], sin[:5], backend="triton")
        strided_w = w.repeat_interleave(2, dim=1)[:, ::2]  # w's values at a column stride of 2
        with pytest.raises(ValueError, match="must be contiguous"):
            fm.decoupled_qk_from_latent(q, c_k, strided_w, bias, k_rope, cos[:5], sin[:5], backend="triton")
    k = torch.nn.functional.linear(c_k, w, bias).view(2, 5, 3, 12)
    ref = fm.decoupled_qk_torch(q, k, k_rope, cos[:5], sin[:5])
    before = q.clone()
    Q, K = fm.decoupled_qk_from_latent(q, c_k, w, strided_bias, k_rope, cos[:5], sin[:5])  # 'auto'
    assert torch.equal(Q, ref[0]) and torch.equal(K, ref[1]) and torch.equal(q, before)  # -> torch ops, q kept
    monkeypatch.setattr(fm, "_interpret", lambda: False)  # 'auto' without a Triton device: torch ops, q untouched
    Q, K = fm.decoupled_qk_from_latent(q, c_k, w, bias, k_rope, cos[:5], sin[:5])
    assert torch.equal(Q, ref[0]) and torch.equal(K, ref[1]) and torch.equal(q, before)


@needs_child
def test_interp_from_latent_no_tokens():
    """Zero sequences: empty Q and K, and a backward that returns empty gradients (no kernel launch, no reshape of an
    empty tensor by an inferred size)."""
    leaves, cos, sin = latent_inputs(0, 4, 3, 12, 6, 20, True, torch.float32)
    grads = run_latent("triton", leaves, cos[:4], sin[:4], 12, 6, 20,
                       (torch.zeros(0, 4, 3, 18), torch.zeros(0, 4, 3, 18)))
    assert [tuple(g.shape) for g in grads] == [(0, 4, 3, 18), (0, 4, 3, 18), (0, 4, 3, 18), (0, 4, 31), (36, 20),
                                              (36,)]
    assert grads[4].abs().max() == 0 and grads[5].abs().max() == 0


@needs_child
def test_interp_knobs_checked(monkeypatch):
    """ROWS and NUM_WARPS are set by hand (bench_train --knob): a ValueError naming the knob, not Triton's error."""
    leaves, cos, sin = inputs()
    for name, bad in (("ROWS", 3), ("NUM_WARPS", 6), ("ROWS", 0)):
        monkeypatch.setattr(fm, name, bad)
        with pytest.raises(ValueError, match=f"{name}={bad}: a power of two"):
            fm.decoupled_qk(*views(leaves, 3, 12, 6), cos, sin, backend="triton")
        monkeypatch.undo()


@needs_child
@pytest.mark.parametrize("mode", ["copy", "q_in_place", "k_up_in_kernel"])
def test_interp_mla_model_with_kernels_equals_torch_ops(mode, monkeypatch):
    """A whole MLA model with decoupled RoPE (query rank and the full query; shared and separate K, V; biases): the
    loss and every gradient with the kernels equal those with torch ops to float32 rounding (chosen by the model's
    key mla_rope_kernels, fused_mla_rope.BACKEND left 'auto'); with q_in_place too (the
    query rotated where its up-projection wrote it, or where the full query's cat did), and with K_UP_IN_KERNEL (K
    from the latent by one kernel: its products summed in another order, so a looser atol)."""
    import fused_gelu as fg
    import fused_loss as fl
    monkeypatch.setattr(fg, "_interpret", lambda: False)  # only this module's kernels (the others have their tests)
    monkeypatch.setattr(fl, "_interpret", lambda: False)
    monkeypatch.setattr(fm, "Q_IN_PLACE", mode == "q_in_place")
    monkeypatch.setattr(fm, "K_UP_IN_KERNEL", mode == "k_up_in_kernel")
    calls = {"fwd": 0, "bwd": 0, "rot": 0}  # the kernels' ops counted: 'auto' must not fall back to torch ops unseen
    names = {"copy": (("fwd", "_FWD"), ("bwd", "_BWD")),
             "q_in_place": (("fwd", "_K_FWD"), ("bwd", "_K_BWD"), ("rot", "_ROTATE")),
             "k_up_in_kernel": (("fwd", "_K_UP"), ("bwd", "_K_BWD"), ("rot", "_ROTATE"))}[mode]
    for key, name in names:
        op = getattr(fm, name)
        monkeypatch.setattr(fm, name, lambda *a, _op=op, _key=key: calls.__setitem__(_key, calls[_key] + 1) or _op(*a))
    x = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    atol = 1e-5 if mode == "k_up_in_kernel" else 1e-6
    for kw in (dict(), dict(q_rank=None, shared_kv=True)):
        out = {}
        for backend in ("auto", "torch"):
            torch.manual_seed(0)
            model = GPT(mla_config(**kw, mla_rope_kernels=backend))
            before = dict(calls)
            _, loss = model(x, x)
            loss.backward()
            ran = {k: calls[k] - before[k] for k in calls}
            # a layer each; the rotation twice a layer (forward R, backward R^T)
            want = ({"fwd": 2, "bwd": 2, "rot": 0 if mode == "copy" else 4} if backend == "auto"
                    else dict.fromkeys(calls, 0))
            assert ran == want
            out[backend] = (loss.detach(), [p.grad for p in model.parameters()])
        torch.testing.assert_close(out["auto"][0], out["torch"][0], atol=1e-6, rtol=1e-6)
        for a, b in zip(out["auto"][1], out["torch"][1]):
            torch.testing.assert_close(a, b, atol=atol, rtol=1e-5)


@needs_child
def test_interp_q_in_place_under_activation_checkpointing(monkeypatch):
    """With activation checkpointing each block's forward runs again in the backward and rotates a fresh query in
    place: the loss and every gradient equal torch ops' without checkpointing."""
    import fused_gelu as fg
    import fused_loss as fl
    monkeypatch.setattr(fg, "_interpret", lambda: False)
    monkeypatch.setattr(fl, "_interpret", lambda: False)
    x = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    out = {}
    for backend, ckpt in (("auto", True), ("torch", False)):
        monkeypatch.setattr(fm, "BACKEND", backend)
        monkeypatch.setattr(fm, "Q_IN_PLACE", True)
        torch.manual_seed(0)
        model = GPT(mla_config(activation_checkpointing=ckpt))
        _, loss = model(x, x)
        loss.backward()
        out[backend] = (loss.detach(), [p.grad for p in model.parameters()])
    torch.testing.assert_close(out["auto"][0], out["torch"][0], atol=1e-6, rtol=1e-6)
    for a, b in zip(out["auto"][1], out["torch"][1]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------------------
# On the GPU


@needs_cuda
def test_cuda_bf16_kernels_match_torch_form():
    B, T, nH, dH, dR = 4, 1024, 12, 64, 32  # GPT-2 MLA's shapes
    leaves, cos, sin = inputs(B, T, nH, dH, dR, dtype=torch.bfloat16, device="cuda")
    gq = torch.randn(B, nH, T, dH + dR, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    gk = torch.randn(B, T, nH, dH + dR, device="cuda", dtype=torch.bfloat16)
    Qa, Ka, grads_a = run("triton", leaves, cos, sin, nH, dH, dR, (gq, gk))
    Qb, Kb, grads_b = run("torch", [x.float() for x in leaves], cos.bfloat16().float(), sin.bfloat16().float(),
                          nH, dH, dR, (gq.float(), gk.float()))
    tol = dict(atol=1e-2, rtol=8e-3)  # one bf16 rounding of each output
    torch.testing.assert_close(Qa.float(), Qb, **tol)
    torch.testing.assert_close(Ka.float(), Kb, **tol)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a.float(), b, atol=3e-2, rtol=8e-3)  # dk^R: a sum of 12 heads, rounded once


@needs_cuda
@pytest.mark.parametrize("dc, nH, dH, dtype, program, want", [
    (128, 12, 64, torch.bfloat16, None, (64, 3)), (128, 12, 64, torch.float32, 120 * 1024, (64, 2)),
    (128, 12, 64, torch.float32, SM86_PROGRAM, None), (256, 12, 64, torch.bfloat16, None, None),
    (512, 16, 128, torch.bfloat16, None, None)])
def test_cuda_from_latent_fits_the_devices_shared_memory(dc, nH, dH, dtype, program, want, monkeypatch):
    """K from the latent as k_up_launch serves it on this GPU and on others (this one answering with their limit a
    program): GPT-2 MLA's 128-wide latent by the kernel at 3 stages, float32 at 2 on a GPU giving a program 120 KB
    and by k_up's matmul on one of 100 KB an SM; a latent of 256, and of 512 with heads of 128 as DeepSeek-V2's (456
    KB at 64 rows and 3 stages, which no GPU gives a program), by the matmul. Values and gradients against the torch
    form."""
    if program is not None:
        monkeypatch.setattr(fm, "shared_memory", lambda device: (program, program + 1024))
    import decode_attention as da
    limit = program or da.shared_memory(torch.device("cuda"))[0]
    assert fm.k_up_launch(dc, dH, torch.tensor([], dtype=dtype).element_size(), limit) == want
    B, T, dR = 2, 256, 64 if dH == 128 else 32
    leaves, cos, sin = latent_inputs(B, T, nH, dH, dR, dc, False, torch.float32)
    leaves = [x.to(device="cuda", dtype=dtype) for x in leaves]
    cos, sin = cos[:T].cuda(), sin[:T].cuda()
    g = torch.Generator().manual_seed(5)
    gq = torch.randn(B, nH, T, dH + dR, generator=g).to(device="cuda", dtype=dtype).transpose(1, 2)
    gk = torch.randn(B, T, nH, dH + dR, generator=g).to(device="cuda", dtype=dtype)
    a = run_latent("triton", leaves, cos, sin, dH, dR, dc, (gq, gk))
    b = run_latent("torch", [x.float() for x in leaves], cos, sin, dH, dR, dc, (gq.float(), gk.float()))
    for x, y in zip(a, b):
        tol = 2e-2 * y.abs().max().item() + 1e-3 if dtype == torch.bfloat16 else 1e-3 * y.abs().max().item() + 1e-5
        assert (x.float() - y).abs().max().item() <= tol


@needs_cuda
@pytest.mark.parametrize("mode", ["copy", "q_in_place", "k_up_in_kernel"])
@pytest.mark.parametrize("shared_kv", [False, True])
def test_cuda_compiled_model_step_matches_torch_ops(shared_kv, mode, monkeypatch):
    """A compiled MLA model's loss and gradients with the kernels (which the profiler must see run) equal those with
    torch ops (whose step must not run them) within bf16 noise; separate latents and a shared one (k and v then
    up-projected from it by two matmuls, k a dense tensor of its own); with q_in_place (the rotation kernel runs),
    and with K_UP_IN_KERNEL (K from the latent by its kernel, no forward kernel of the copying pair)."""
    x = torch.randint(0, 512, (4, 64), device="cuda")
    y = torch.randint(0, 512, (4, 64), device="cuda")
    monkeypatch.setattr(fm, "Q_IN_PLACE", mode == "q_in_place")
    monkeypatch.setattr(fm, "K_UP_IN_KERNEL", mode == "k_up_in_kernel")
    names = ("_qk_fwd_kernel", "_qk_bwd_kernel", "_rotate_tail_kernel", "_k_up_fwd_kernel")
    want = {"copy": set(names[:2]), "q_in_place": set(names[:3]), "k_up_in_kernel": set(names[1:])}[mode]
    out, ran = {}, {}
    for backend in ("auto", "torch"):
        monkeypatch.setattr(fm, "BACKEND", backend)
        torch.manual_seed(0)
        model = GPT(mla_config(n_head=4, n_embd=256, q_rank=64, kv_rank=64, block_size=64, vocab_size=512, bias=False,
                               shared_kv=shared_kv)).cuda()  # no key bias: its gradient is zero in exact arithmetic
        *out[backend], ran[backend] = compiled_step_kernels(model, x, y, names)
    torch._dynamo.reset()
    assert ran == {"auto": want, "torch": set()}
    assert abs(out["auto"][0] - out["torch"][0]) < 1e-3
    for a, b in zip(out["auto"][1], out["torch"][1]):
        assert ((a - b).norm() / b.norm().clamp_min(1e-12)).item() < 2e-2


def test_bench_mla_rope_smoke_on_cpu(tmp_path):
    """scripts/bench_mla_rope runs on the CPU (its copy and torch-form rows) and writes its report, every number
    positive, the passes' bytes as the formula: forward q, k, k^R in and Q, K out; backward dQ, dK in and dq, dk,
    dk^R out (the same count)."""
    import json
    from scripts import bench_mla_rope
    bench_mla_rope.main(["--device", "cpu", "--shapes", "2x16", "--heads", "3", "--head_dim", "8", "--rope_dim", "4",
                         "--calls", "2", "--repeats", "1", "--out_dir", str(tmp_path)])
    rows = json.loads((tmp_path / "bench_mla_rope.json").read_text())["rows"]
    assert [r["name"].split()[0] for r in rows] == ["copy", "inductor"]
    assert all(r["fwd_ms"] > 0 for r in rows)
    # the copy row's backward is the copy's time for the backward's bytes, the forward's count: positive, = fwd
    assert rows[0]["bwd_ms"] == pytest.approx(rows[0]["fwd_ms"]) and rows[0]["bwd_ms"] > 0
    # inductor's backward is (forward + backward) - forward, two profiled CPU times of 2 calls each: not bounded
    # below by 0 (once negative, -0.02 ms, in 40 runs with another process loading the CPU), so only a number
    assert isinstance(rows[1]["bwd_ms"], float) and math.isfinite(rows[1]["bwd_ms"])
    mb = 2 * 16 * 4 * (3 * 12 + 3 * 8 + 4 + 2 * 3 * 12) / 1e6  # fp32 on the CPU
    assert rows[0]["fwd_tbs"] == pytest.approx(mb / rows[0]["fwd_ms"] / 1e3)
    assert "| 2x16 | inductor" in (tmp_path / "bench_mla_rope.md").read_text()


def test_bench_k_up_needs_a_gpu():
    """scripts/bench_k_up times the kernel on a GPU: without one, one line, not a traceback; a --settings item that
    is not ROWSxSTAGES (24 rows: not a power of two) is named before that."""
    import subprocess
    import sys
    if CUDA:
        pytest.skip("a GPU is here")
    from pathlib import Path
    r = subprocess.run([sys.executable, "-m", "scripts.bench_k_up"], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 1 and r.stderr.strip() == "No CUDA device: bench_k_up times the kernel on a GPU"
    bad = subprocess.run([sys.executable, "-m", "scripts.bench_k_up", "--settings", "64x3,24x1"], capture_output=True,
                         text=True, timeout=120, cwd=Path(__file__).resolve().parent.parent)
    assert bad.returncode == 1 and bad.stderr.strip().startswith("--settings: '24x1' is not ROWSxSTAGES")

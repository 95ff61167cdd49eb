"""fused_gelu.gelu: exact GELU, x Phi(x), with Phi written through erfcx (one exp2 shared with the backward).

Properties: the stored erfcx polynomial is accurate to float32's spacing on its range (and fit_erfcx makes one as
good); the kernels give, for every bf16 input above -13, the correctly rounded GELU (a float32 erf form misses in the
negative tail) and a derivative within 1e-6 of the float64 one; sizes that are not multiples of the block; autograd
through gelu matches F.gelu's; dispatch and errors (F.gelu on the CPU; a ValueError naming the backend or why the
kernels cannot run); the model's MLP takes it inside one traced graph. CPU: the kernels through Triton's
interpreter (tests/interpreted.py); CUDA (skipped without a GPU): bf16, and a compiled model's step.
"""
import pytest
import torch
import torch.nn.functional as F

import fused_gelu as fg
from interpreted import needs_child
from tiny import compiled_step_kernels, traced_functions_by_backend

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


def every_bf16(lo: float = -13.0) -> torch.Tensor:
    """Every finite bf16 value >= lo (as float32: exact), both zeros included."""
    bits = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16)
    x = bits.view(torch.bfloat16).float()
    return x[torch.isfinite(x) & (x >= lo)].contiguous()


def normal_cdf(x: torch.Tensor) -> torch.Tensor:
    """Phi(x) in float64 as 1/2 erfc(-x / sqrt 2), accurate in the negative tail (torch.special.ndtr is not: it
    returns 0 below x = -8.3, and 1% off at -7.8)."""
    return 0.5 * torch.special.erfc(-x.double() / 2 ** 0.5)


def exact_gelu(x: torch.Tensor) -> torch.Tensor:
    return x.double() * normal_cdf(x)


def exact_gelu_grad(x: torch.Tensor):
    """(GELU'(x), the size of its two terms Phi(x) + |x| phi(x), against which its error is measured)."""
    x = x.double()
    pdf = torch.exp(-0.5 * x * x) / (2 * torch.pi) ** 0.5
    return normal_cdf(x) + x * pdf, normal_cdf(x) + x.abs() * pdf


def bf16_misses(y: torch.Tensor, x: torch.Tensor) -> int:
    """How many of y's values, rounded to bf16, differ from the correctly rounded bf16 GELU of x, where that GELU is
    0 or a normal number (|GELU| >= 2^-126: below, x Phi(x) ~ x / 2 lands on a tie of bf16's subnormal spacing that
    float32 cannot break)."""
    ref = exact_gelu(x)
    normal = (ref == 0) | (ref.abs() >= 2.0 ** -126)
    return int((y.to(torch.bfloat16) != ref.to(torch.bfloat16))[normal].sum())


def test_stored_erfcx_polynomial_is_accurate_to_float32():
    t = torch.linspace(0.0, fg.ERFCX_T_MAX, 100_003, dtype=torch.float64)
    u = 1.0 / (1.0 + fg.ERFCX_U_SCALE * t)
    p = torch.zeros_like(u)
    for c in fg.ERFCX_COEFFS:  # Horner, highest power first, as the kernel
        p = p * u + c
    rel = (u * p / torch.special.erfcx(t) - 1).abs().max().item()
    assert rel < 5e-8  # float32's relative spacing is 6e-8 at most
    coeffs, fit_rel = fg.fit_erfcx()
    assert fit_rel < 5e-8 and coeffs.shape == (len(fg.ERFCX_COEFFS),)


def test_float32_erf_form_misses_in_the_tail():
    """What the kernels are measured against: F.gelu in float32 (1 + erf(x / sqrt 2), which cancels for x << 0)
    misses the correctly rounded bf16 GELU on some bf16 inputs, so 'no misses' below is a property of the form."""
    x = every_bf16()
    assert bf16_misses(F.gelu(x), x) > 0


def test_dispatch_and_errors(monkeypatch):
    x = torch.randn(5, 7)
    with pytest.raises(ValueError, match="backend='bogus'"):
        fg.gelu(x, backend="bogus")
    monkeypatch.setattr(fg, "_interpret", lambda: False)  # the CPU without the interpreter
    with pytest.raises(ValueError, match="cannot run: device cpu"):
        fg.gelu(x, backend="triton")
    assert torch.equal(fg.gelu(x), F.gelu(x)) and torch.equal(fg.gelu(x, backend="torch"), F.gelu(x))
    from model import GPTConfig
    with pytest.raises(ValueError, match="gelu='erf' is unknown: allowed"):
        GPTConfig(gelu="erf")


def test_unsupported_names_why(monkeypatch):
    monkeypatch.setattr(fg, "_interpret", lambda: True)  # the CPU counts as a Triton device, as in the child
    x = torch.randn(4, 6)
    if fg._HAVE_TRITON:
        assert fg.unsupported(x) is None
        assert all(fg.unsupported(x.to(dtype)) is None for dtype in (torch.float16, torch.bfloat16))
        assert "dtype torch.float64" in fg.unsupported(x.double())
        assert "contiguous" in fg.unsupported(x.t())
    monkeypatch.setattr(fg, "_interpret", lambda: False)
    assert "device cpu" in fg.unsupported(x)


def test_model_mlp_is_one_traced_graph_with_the_kernels(monkeypatch):
    """model.MLP calls gelu; with the kernel path chosen, torch.compile still traces the whole training forward as
    one graph (torch._dynamo.export fails on any graph break): the ops were registered when the model was built.
    The graph holds one more autograd function (the GELU's: the loss head's is the other) than with F.gelu."""
    from model import GPT, GPTConfig

    def build(backend):
        return GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=200, bias=False, gelu=backend))

    functions = traced_functions_by_backend(monkeypatch, fg, build, torch.randint(0, 200, (2, 16)))
    assert functions == {"auto": 2, "torch": 1}


# ----------------------------------------------------------------------------------------
# The kernels through Triton's interpreter (tests/test_interpreted.py runs these in its child process)


@needs_child
def test_interp_every_bf16_input_correctly_rounded():
    x = every_bf16()
    y = fg.gelu(x, backend="triton")
    assert y.dtype == torch.float32 and y.shape == x.shape
    assert bf16_misses(y, x) == 0
    ref = exact_gelu(x)
    rel = ((y.double() - ref).abs() / ref.abs())[ref.abs() > 1e-30]
    # float32's rounding of x^2 grows in exp(-x^2 / 2) with x^2: 3e-6 at x = -13
    assert rel[x[ref.abs() > 1e-30].abs() <= 4].max().item() < 1e-6 and rel.max().item() < 1e-5


@needs_child
def test_interp_backward_matches_float64():
    x = every_bf16().requires_grad_()
    g = torch.linspace(-2.0, 3.0, x.numel())
    fg.gelu(x, backend="triton").backward(g)
    ref, size = exact_gelu_grad(x.detach())
    err = (x.grad.double() - g.double() * ref).abs() / (g.double().abs() * size).clamp_min(1e-30)
    assert err[x.detach().abs() <= 4].max().item() < 1e-6 and err.max().item() < 1e-5  # as the forward


@needs_child
@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 1000])
def test_interp_sizes_and_fp16(n, monkeypatch):
    """Sizes around the block (64 here) and none, a (..., hidden) shape, fp16: the values and the gradient against float64,
    F.gelu's within float32's error of its own (up to 1e-6 absolute at |x| <= 9: its erf form cancels in the tail)."""
    monkeypatch.setattr(fg, "BLOCK", 64)
    torch.manual_seed(n)
    x = (3 * torch.randn(1, n)).requires_grad_()  # n elements: blocks of 64 and a partial one
    y = fg.gelu(x, backend="triton")
    y.backward(torch.ones_like(y))
    ref_grad, _ = exact_gelu_grad(x.detach())
    torch.testing.assert_close(y.double(), exact_gelu(x.detach()), rtol=1e-5, atol=1e-30)  # tail: as above
    torch.testing.assert_close(x.grad.double(), ref_grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(y, F.gelu(x.detach()), rtol=1e-6, atol=1e-6)
    h = x.detach().half()
    torch.testing.assert_close(fg.gelu(h, backend="triton"), exact_gelu(h).half(), rtol=1e-3, atol=1e-4)


@needs_child
def test_interp_kernels_store_their_n_elements_only():
    """Each kernel writes its n values and nothing past them: outputs into the front of a wider buffer (n = 100, blocks
    of 64: a partial last block) leave the rest of it as it was."""
    n, block = 100, 64
    x = (3 * torch.randn(n + block, generator=torch.Generator().manual_seed(3)))[:n]  # reads past n stay in the buffer
    g = torch.linspace(-2.0, 3.0, n + block)[:n]
    for kernel, args, ref in ((fg._gelu_fwd_kernel, (x,), exact_gelu(x)),
                              (fg._gelu_bwd_kernel, (g, x), g.double() * exact_gelu_grad(x)[0])):
        out = torch.full((n + block,), 7.0)
        kernel[(2,)](*args, out, n, BLOCK=block)
        torch.testing.assert_close(out[:n].double(), ref, rtol=1e-5, atol=1e-7)
        assert (out[n:] == 7.0).all()


# ----------------------------------------------------------------------------------------
# On the GPU


@needs_cuda
def test_cuda_every_bf16_input_correctly_rounded_and_the_gradient():
    x = every_bf16().cuda()
    xb = x.to(torch.bfloat16).requires_grad_()
    y = fg.gelu(xb, backend="triton")
    assert y.dtype == torch.bfloat16
    assert bf16_misses(y.float(), x) == 0
    g = torch.linspace(-2.0, 3.0, x.numel(), device="cuda").to(torch.bfloat16)
    y.backward(g)
    ref, size = exact_gelu_grad(x)
    err = (xb.grad.double() - (g.double() * ref).to(torch.bfloat16).double()).abs()
    spacing = (g.double().abs() * size).clamp_min(1e-30) * 2 ** -7  # one bf16 spacing of the terms' size
    assert (err <= spacing).all()


@needs_cuda
def test_cuda_offsets_past_2_31_elements():
    """A tensor of 2^31 + 3,000 fp16 elements: its last programs' element offsets are past int32's range (the kernels
    compute them in int64), so the end of the output is the GELU of the end of the input, forward and backward
    (4.3 GB a tensor, four of them; skipped where the GPU has less free memory)."""
    n, tail = 2 ** 31 + 3000, 8192
    if torch.cuda.mem_get_info()[0] < 5 * 2 * n:
        pytest.skip("needs ~22 GB of free GPU memory")
    x = torch.zeros(n, dtype=torch.float16, device="cuda")
    x[-tail:] = (3 * torch.randn(tail, generator=torch.Generator().manual_seed(0))).half().cuda()
    end = x[-tail:].float()
    y = fg.gelu(x, backend="triton")
    torch.testing.assert_close(y[-tail:], exact_gelu(end).half(), rtol=1e-3, atol=1e-4)
    del y
    dx = fg._BWD(torch.ones_like(x), x)
    torch.testing.assert_close(dx[-tail:], exact_gelu_grad(end)[0].half(), rtol=1e-3, atol=1e-4)


@needs_cuda
def test_cuda_float32_within_float32_error():
    """float32 in and out on the GPU (its exp2 and division are the hardware's approximate ones): the values and the
    derivative within a few float32 spacings of float64, as in the interpreter."""
    x = every_bf16().cuda().requires_grad_()
    y = fg.gelu(x, backend="triton")
    y.backward(torch.ones_like(y))
    ref = exact_gelu(x.detach())
    keep = ref.abs() > 1e-30
    rel = ((y.double() - ref).abs() / ref.abs())[keep]
    small = x.detach()[keep].abs() <= 4
    assert rel[small].max().item() < 2e-6 and rel.max().item() < 2e-5
    ref_grad, size = exact_gelu_grad(x.detach())
    err = (x.grad.double() - ref_grad).abs() / size.clamp_min(1e-30)
    assert err[x.detach().abs() <= 4].max().item() < 2e-6 and err.max().item() < 2e-5


@needs_cuda
def test_cuda_compiled_model_step_matches_f_gelu():
    """A compiled GPT-2-like model's loss and gradients with the kernels (gelu='auto', which the profiler must see
    run) equal those with F.gelu (gelu='torch', whose step must not run them) within bf16 noise."""
    from model import GPT, GPTConfig
    kw = dict(n_layer=2, n_head=4, n_embd=128, block_size=64, vocab_size=512, bias=False)
    torch.manual_seed(0)
    x, y = torch.randint(0, 512, (4, 64), device="cuda"), torch.randint(0, 512, (4, 64), device="cuda")
    out, ran = {}, {}
    for backend in ("auto", "torch"):
        torch.manual_seed(0)  # the same weights
        model = GPT(GPTConfig(**kw, gelu=backend)).cuda()
        *out[backend], ran[backend] = compiled_step_kernels(model, x, y, ("_gelu_fwd_kernel", "_gelu_bwd_kernel"))
    torch._dynamo.reset()
    assert ran == {"auto": {"_gelu_fwd_kernel", "_gelu_bwd_kernel"}, "torch": set()}
    assert abs(out["auto"][0] - out["torch"][0]) < 1e-3
    for a, b in zip(out["auto"][1], out["torch"][1]):
        assert ((a - b).norm() / b.norm().clamp_min(1e-12)).item() < 2e-2

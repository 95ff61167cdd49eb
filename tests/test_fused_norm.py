"""fused_norm.add_norm: the residual add and the norm after it in one kernel (the decode step's).

Properties: the kernel gives (x + delta, norm(x + delta)) of the two torch ops, against float64, for
LayerNorm with and without bias and RMSNorm, any row width up to MAX_DIM, batch rows read with any row
stride (an expanded position embedding); 'auto' takes the two torch ops wherever the kernel's conditions
fail (CPU, mixed dtypes, autocast); a forced kernel that cannot run is an error naming why.
CPU: the torch backend and the dispatch; the kernel through Triton's interpreter (tests/interpreted.py).
CUDA (skipped without a GPU): the kernel in bf16 and fp32 against float64.
"""
import copy

import pytest
import torch

import fused_norm as fn
from interpreted import needs_child
from model import LayerNorm, RMSNorm

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")

NORMS = {"layernorm_bias": lambda d: LayerNorm(d, bias=True), "layernorm": lambda d: LayerNorm(d, bias=False),
         "rmsnorm": lambda d: RMSNorm(d, eps=1e-6)}


def make(kind, rows, d, dtype, device="cpu", seed=0):
    """x (rows, 1, d), delta (rows, 1, d) and a norm with random (non-trivial) parameters."""
    g = torch.Generator().manual_seed(seed)
    norm = NORMS[kind](d)
    with torch.no_grad():
        for p in norm.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if p is norm.weight else 0.0))
    x = (torch.randn(rows, 1, d, generator=g) * 3 + 1).to(device=device, dtype=dtype)
    delta = torch.randn(rows, 1, d, generator=g).to(device=device, dtype=dtype)
    return x, delta, norm.to(device=device, dtype=dtype)


def check(s, y, x, delta, norm, tol):
    """s is x + delta rounded to x's dtype, exactly; y is the norm of that s within tol of float64."""
    s_ref = (x.double() + delta.double()).to(x.dtype)
    assert s.dtype == x.dtype and y.dtype == x.dtype and s.shape == x.shape and y.shape == x.shape
    assert torch.equal(s, s_ref)
    y_ref = copy.deepcopy(norm).double()(s_ref.double())  # a float64 copy of the norm's parameters
    assert (y.double() - y_ref).abs().max().item() < tol


@pytest.mark.parametrize("kind", list(NORMS))
def test_torch_backend_is_the_two_ops(kind):
    x, delta, norm = make(kind, 3, 40, torch.float32)
    s, y = fn.add_norm(x, delta, norm)  # CPU: 'auto' is the two torch ops
    assert fn.add_norm_backend(x, delta, norm) == "torch"
    torch.testing.assert_close(s, x + delta, rtol=0, atol=0)
    torch.testing.assert_close(y, norm(x + delta), rtol=0, atol=0)


def test_dispatch_and_errors():
    x, delta, norm = make("layernorm", 2, 16, torch.float32)
    with pytest.raises(ValueError, match="backend must be"):
        fn.add_norm(x, delta, norm, backend="cuda")
    plain = torch.nn.LayerNorm(16)  # any norm module works with the two ops; the kernel knows ours only
    torch.testing.assert_close(fn.add_norm(x, delta, plain, backend="torch")[1], plain(x + delta), rtol=0, atol=0)
    with pytest.raises(ValueError, match="knows model.LayerNorm and model.RMSNorm, not LayerNorm"):
        fn.add_norm(x, delta, plain, backend="triton")
    if not fn._interpret():
        with pytest.raises(ValueError, match="device cpu"):
            fn.add_norm(x, delta, norm, backend="triton")
    meta = dict(device="meta")
    assert "share one of" in fn._unsupported(x.to(torch.float16), delta, norm)  # mixed dtypes
    assert "share one of" in fn._unsupported(x, delta, copy.deepcopy(norm).half())  # the norm's parameters' too
    assert "shapes" in fn._unsupported(x[..., :8], delta[..., :8], norm)
    big = LayerNorm(fn.MAX_DIM + 1, bias=False).to(**meta)
    assert "rows of" in fn._unsupported(torch.empty(1, fn.MAX_DIM + 1, **meta), torch.empty(1, fn.MAX_DIM + 1, **meta), big)
    widest = LayerNorm(fn.MAX_DIM, bias=False).to(**meta)  # rows of MAX_DIM are the kernel's (meta: refused on the device)
    assert "device meta" in fn._unsupported(torch.empty(1, fn.MAX_DIM, **meta), torch.empty(1, fn.MAX_DIM, **meta), widest)


# ----------------------------------------------------------------------------------------
# The kernel through Triton's interpreter (tests/test_interpreted.py runs these in its child process)


@needs_child
@pytest.mark.parametrize("kind", list(NORMS))
@pytest.mark.parametrize("d", [768, 100, 2048])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_interp_kernel_matches_float64(kind, d, dtype):
    x, delta, norm = make(kind, 3, d, dtype)
    s, y = fn.add_norm(x, delta, norm, backend="triton")
    check(s, y, x, delta, norm, 2e-5 if dtype == torch.float32 else 1e-2)


@needs_child
def test_interp_kernel_reads_an_expanded_delta():
    """delta with row stride 0 (the position embedding (1, d) expanded over the batch) is read as such."""
    x, _, norm = make("layernorm_bias", 4, 96, torch.float32)
    delta = torch.randn(1, 1, 96).expand_as(x)
    s, y = fn.add_norm(x, delta, norm, backend="triton")
    check(s, y, x, delta, norm, 2e-5)


@needs_child
@pytest.mark.parametrize("kind", list(NORMS))
def test_interp_kernel_eps_the_rounded_sum_and_strided_rows(kind):
    """fp32 rows of mean square ~2e-6, the eps's size (1e-5 LayerNorm, 1e-6 RMSNorm): eps is in the kernel's
    denominator as in the norm's; x a view of wider rows (row stride 130, d = 100: s and y, new tensors, have 100).
    fp16 rows 2048 + delta, |delta| < 0.5: the sum rounds to 2048 (the spacing there is 1-2), so the statistics are
    those of the rounded sum (LayerNorm: a constant row, its bias), not of x + delta."""
    x, delta, norm = make(kind, 3, 100, torch.float32)
    wide = torch.randn(3, 1, 130)
    wide[..., :100] = x * 3e-4
    x, delta = wide[..., :100], delta * 1e-3
    s, y = fn.add_norm(x, delta, norm, backend="triton")
    assert x.stride(0) == 130 and s.stride(0) == y.stride(0) == 100
    check(s, y, x, delta, norm, 2e-5)
    x, delta, norm = make(kind, 3, 100, torch.float16, seed=1)
    x, delta = torch.full_like(x, 2048.0), (delta.float().clamp(-1, 1) * 0.45).half()
    s, y = fn.add_norm(x, delta, norm, backend="triton")
    assert (s == 2048).all()
    check(s, y, x, delta, norm, 1e-2)


# ----------------------------------------------------------------------------------------
# CUDA


@needs_cuda
@pytest.mark.parametrize("kind", list(NORMS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("d", [2048, 1000])  # 1000: masked lanes (what the masked loads' `other` fills) on the GPU
def test_cuda_kernel_matches_float64(kind, dtype, d):
    x, delta, norm = make(kind, 32, d, dtype, device="cuda")
    assert fn.add_norm_backend(x, delta, norm) == "triton"
    s, y = fn.add_norm(x, delta, norm)
    # bf16: the output's own rounding (values up to ~5: an ulp of 2^-5), fp32: reduction order only
    check(s, y, x, delta, norm, 4e-2 if dtype == torch.bfloat16 else 1e-4)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert fn.add_norm_backend(x, delta, norm) == "torch"  # autocast decides dtypes: the two ops

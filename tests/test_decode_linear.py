"""decode_linear: [residual +] act(norm(a) @ W^T + b) in one kernel (the decode step's matmuls).

Properties: the kernel computes the torch ops' formula, against float64, for every prologue (none,
LayerNorm with and without bias, RMSNorm), epilogue (bias, GELU, SwiGLU with and without biases, residual)
and weight layout ((N, K) contiguous, or the transpose of a (K, N) matrix), at 1 to MAX_ROWS rows and widths
that are not multiples of any block; 'auto' takes the torch
ops wherever the kernel's conditions fail (CPU, mixed dtypes, autocast, ENABLED off), and those are exactly
the unfused model's ops; a forced kernel that cannot run is an error naming why.
Both tilings (a whole K row in one chunk, a loop over K chunks) are taken by the cases. CPU: the torch backend
and the dispatch; the kernel through Triton's interpreter (tests/interpreted.py; fp32 and fp16). CUDA
(skipped without a GPU): bf16 and fp32, GPT-2's and LLaMA-1B's shapes.
"""
import copy

import pytest
import torch
import torch.nn.functional as F

import decode_linear as dl
from interpreted import needs_child
from model import LayerNorm, RMSNorm

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")

NORMS = {"none": None, "layernorm_bias": lambda d: LayerNorm(d, bias=True),
         "layernorm": lambda d: LayerNorm(d, bias=False), "rmsnorm": lambda d: RMSNorm(d, eps=1e-6)}


def make(M, K, N, dtype, *, norm="layernorm_bias", act=None, bias=True, residual=False, kn=False,
         device="cpu", seed=0):
    """Inputs of one call with random (non-trivial) values: a (M, K) with an offset (LayerNorm must center),
    weight and weight2 (N, K) (kn: transposes of contiguous (K, N) matrices), the norm, biases, residual."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g) * scale + shift).to(device=device, dtype=dtype)

    norm_mod = None
    if NORMS[norm] is not None:
        norm_mod = NORMS[norm](K)
        with torch.no_grad():
            for p in norm_mod.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if p is norm_mod.weight else 0.0))
        norm_mod = norm_mod.to(device=device, dtype=dtype)
    weight = rnd(K, N, scale=K ** -0.5).t() if kn else rnd(N, K, scale=K ** -0.5)
    kw = dict(norm=norm_mod, act=act, bias=rnd(N, scale=0.5) if bias else None)
    if act == "swiglu":
        weight2 = rnd(K, N, scale=K ** -0.5).t() if kn else rnd(N, K, scale=K ** -0.5)
        kw.update(weight2=weight2, bias2=rnd(N, scale=0.5) if bias else None)
    if residual:
        kw["residual"] = rnd(M, N, scale=2.0)
    return rnd(M, K, scale=3.0, shift=1.0), weight, kw


def reference(a, weight, kw):
    """The formula in float64 (the norm a float64 copy of the module)."""
    d = {k: (v.double() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    h = copy.deepcopy(kw["norm"]).double()(a.double()) if kw["norm"] is not None else a.double()
    y = F.linear(h, weight.double(), d["bias"])
    if kw["act"] == "gelu":
        y = F.gelu(y)
    elif kw["act"] == "swiglu":
        y = F.silu(y) * F.linear(h, d["weight2"], d["bias2"])
    return y if kw.get("residual") is None else d["residual"] + y


def check(out, a, weight, kw, tol):
    """out within tol of float64 relative to the output's scale (bf16/fp16: the rounding of its inputs and
    intermediates, as the torch ops round them)."""
    ref = reference(a, weight, kw)
    assert out.dtype == a.dtype and out.shape == ref.shape
    err = (out.double() - ref).abs().max().item() / max(1.0, ref.abs().max().item())
    assert err < tol, err


@pytest.mark.parametrize("act", [None, "gelu", "swiglu"])
@pytest.mark.parametrize("norm", list(NORMS))
def test_torch_backend_is_the_unfused_ops(norm, act):
    a, weight, kw = make(3, 40, 24, torch.float32, norm=norm, act=act, residual=True)
    assert dl.decode_linear_backend(a, weight, **kw) == "torch"  # CPU
    out = dl.decode_linear(a, weight, **kw)
    h = kw["norm"](a) if kw["norm"] is not None else a
    y = F.linear(h, weight, kw["bias"])
    y = F.gelu(y) if act == "gelu" else F.silu(y) * F.linear(h, kw["weight2"], kw["bias2"]) if act else y
    torch.testing.assert_close(out, kw["residual"] + y, rtol=0, atol=0)


def test_dispatch_and_errors():
    a, weight, kw = make(2, 16, 8, torch.float32)
    with pytest.raises(ValueError, match="backend must be"):
        dl.decode_linear(a, weight, **kw, backend="cuda")
    with pytest.raises(ValueError, match="act must be one of"):
        dl.decode_linear(a, weight, act="relu")
    with pytest.raises(ValueError, match="weight2 is SwiGLU's up projection"):
        dl.decode_linear(a, weight, act="swiglu")
    with pytest.raises(ValueError, match="weight2 is SwiGLU's up projection"):
        dl.decode_linear(a, weight, weight2=weight)
    plain = torch.nn.LayerNorm(16)  # any norm module works with the torch ops; the kernel knows ours only
    torch.testing.assert_close(dl.decode_linear(a, weight, norm=plain, backend="torch"),
                               F.linear(plain(a), weight), rtol=0, atol=0)
    with pytest.raises(ValueError, match="knows model.LayerNorm and model.RMSNorm, not LayerNorm"):
        dl.decode_linear(a, weight, norm=plain, backend="triton")
    if not dl._interpret():
        with pytest.raises(ValueError, match="device cpu"):
            dl.decode_linear(a, weight, **kw, backend="triton")
    un = lambda a, w, **k: dl._unsupported(a, w, k.get("bias"), k.get("norm"), k.get("act"), k.get("weight2"),
                                           k.get("bias2"), k.get("residual"))
    assert "share one of" in un(a.half(), weight, **kw)
    assert "shapes" in un(a[:, :8], weight, **kw)
    assert "rows must be contiguous" in un(a.t().contiguous().t(), weight, **kw)
    assert "residual must be" in un(a, weight, **kw, residual=torch.zeros(2, 9))
    assert "vectors of the matching size" in un(a, weight, **{**kw, "bias": torch.zeros(1, 8)})
    assert "vectors of the matching size" in un(a, weight, **{**kw, "bias": torch.zeros(7)})  # not N
    assert "vectors of the matching size" in un(a, weight, **{**kw, "bias": torch.zeros(8, 2)[:, 0]})  # strided
    assert "residual must be" in un(a, weight, **{**kw, "residual": torch.zeros(2, 16)[:, ::2]})  # strided rows
    assert "needs weight2 of weight's shape" in un(a, weight, **{**kw, "act": "swiglu", "weight2": weight[:4]})
    assert "on one device" in un(a, weight, **{**kw, "bias": torch.zeros(8, device="meta")})


def test_enabled_off_takes_torch(monkeypatch):
    monkeypatch.setattr(dl, "ENABLED", False)
    a, weight, kw = make(2, 16, 8, torch.float32)
    assert dl.decode_linear_backend(a, weight, **kw) == "torch"


@pytest.mark.parametrize("M", [1, 2, 3, 4])
@pytest.mark.parametrize("N,K", [(8, 16), (2304, 768), (768, 3072), (50304, 768), (2048, 8192), (100, 20000)])
def test_config_tiles(M, N, K):
    """Tiles are powers of two (tl.arange), the product tile within TILE, the column block within its bounds;
    one chunk exactly where the whole (padded) K row fits beside MIN_BLOCK_N columns, else a loop over K chunks with
    LOOP_BLOCK_N columns."""
    bm, bn, bk, one = dl._config(M, N, K, torch.device("cpu"))
    assert all(v & (v - 1) == 0 for v in (bm, bn, bk)) and bm == min(1 << (M - 1).bit_length(), dl.MAX_BLOCK_M)
    assert dl.MIN_BLOCK_N <= bn <= dl.MAX_BLOCK_N and bm * bn * bk <= dl.TILE
    fits = bm * dl.MIN_BLOCK_N * max(16, 1 << (K - 1).bit_length()) <= dl.TILE
    assert one == fits and (bk >= K if one else bk < K)
    assert one or bn == dl.LOOP_BLOCK_N


def test_more_rows_than_max_take_torch():
    """The kernel serves up to MAX_ROWS rows (its batch-1 decoding case and a few more), more than 2 only where K is
    at most WIDE_ROWS_MAX_K (to a power of two) or the weight has at most WIDE_ROWS_MAX_WEIGHT elements, more than 1
    only where it has at most MULTI_ROW_MAX_WEIGHT (the LM heads: one row); the rest go to cuBLAS."""
    def why(M, K, N=8):
        a, weight, kw = make(M, K, 8, torch.float32)
        if N != 8:  # a weight of N rows without N x K elements in memory (only its shape is read)
            weight = weight[:1].expand(N, K)
        return dl._unsupported(a, weight, None, kw["norm"], None, None, None, None)

    def served(M, K, N=8):
        reason = why(M, K, N)
        assert (reason is None or reason.startswith("device cpu")) == dl.serves_rows(M, K, N), (M, K, N, reason)
        return reason is None or reason.startswith("device cpu")  # (on a Triton device: served)
    assert "MAX_ROWS = " in why(dl.MAX_ROWS + 1, 16) and not served(dl.MAX_ROWS + 1, 16)
    assert served(dl.MAX_ROWS, 16) and served(3, dl.WIDE_ROWS_MAX_K)
    wide = dl.WIDE_ROWS_MAX_K * 2  # a K past WIDE_ROWS_MAX_K: served at 3-4 rows up to WIDE_ROWS_MAX_WEIGHT elements
    at, past = dl.WIDE_ROWS_MAX_WEIGHT // wide, dl.WIDE_ROWS_MAX_WEIGHT // wide + 1
    assert at * wide == dl.WIDE_ROWS_MAX_WEIGHT
    assert served(3, wide, at) and served(dl.MAX_ROWS, wide, at) and served(3, wide + 1)
    assert not served(3, wide, past) and not served(dl.MAX_ROWS, wide, past)
    assert "WIDE_ROWS_MAX_WEIGHT" in why(3, wide, past)
    assert served(2, wide, past) and served(1, 4 * wide, past)
    assert served(3, dl.WIDE_ROWS_MAX_K, past)  # K within WIDE_ROWS_MAX_K: any weight up to MULTI_ROW_MAX_WEIGHT
    K = 512  # a weight at the bound and one row of K past it
    at, past = dl.MULTI_ROW_MAX_WEIGHT // K, dl.MULTI_ROW_MAX_WEIGHT // K + 1
    assert at * K == dl.MULTI_ROW_MAX_WEIGHT
    assert served(1, K, past) and served(2, K, at) and served(dl.MAX_ROWS, K, at)
    assert not served(2, K, past) and not served(dl.MAX_ROWS, K, past) and "MULTI_ROW_MAX_WEIGHT" in why(2, K, past)


# ----------------------------------------------------------------------------------------
# The kernel through Triton's interpreter (tests/test_interpreted.py runs these in its child process)


CASES = [  # (M, K, N, norm, act, bias, residual, kn): every prologue, epilogue and layout at least once
    (1, 96, 40, "layernorm_bias", None, True, False, False),
    (1, 100, 72, "layernorm", "gelu", True, False, True),
    (3, 64, 24, "rmsnorm", "swiglu", False, False, False),
    (2, 48, 56, "none", None, True, True, False),
    (4, 200, 33, "rmsnorm", "swiglu", True, True, True),
    (1, 300, 20, "none", None, False, True, True),
    (4, 1000, 40, "layernorm_bias", "gelu", True, True, False),  # 4 rows, two blocks of 2, in one chunk
    (2, 5000, 24, "rmsnorm", "swiglu", True, True, True),  # K in a loop of chunks (not one)
    (3, 5000, 24, "layernorm_bias", "gelu", True, True, False),  # 3 rows in the loop (a small weight): a masked row
]


def test_cases_take_both_paths():
    """The interpreted cases exercise one chunk and the loop over K chunks (with the interpreter's SM count)."""
    paths = {dl._config(M, N, K, torch.device("cpu"))[3] for M, K, N, *_ in CASES}
    assert paths == {True, False}


@needs_child
@pytest.mark.parametrize("two_d", [True, False], ids=["2d", "3d"])  # PRODUCT_2D: the product's form (one chunk)
@pytest.mark.parametrize("case", CASES)
def test_interp_fp32_matches_float64(case, two_d, monkeypatch):
    monkeypatch.setattr(dl, "PRODUCT_2D", two_d)
    M, K, N, norm, act, bias, res, kn = case
    a, weight, kw = make(M, K, N, torch.float32, norm=norm, act=act, bias=bias, residual=res, kn=kn)
    check(dl.decode_linear(a, weight, **kw, backend="triton"), a, weight, kw, 2e-5)


@needs_child
@pytest.mark.parametrize("case", CASES[:3] + CASES[-2:])
def test_interp_fp16_matches_float64(case):
    M, K, N, norm, act, bias, res, kn = case
    a, weight, kw = make(M, K, N, torch.float16, norm=norm, act=act, bias=bias, residual=res, kn=kn)
    check(dl.decode_linear(a, weight, **kw, backend="triton"), a, weight, kw, 1e-2)


@needs_child
@pytest.mark.parametrize("norm,K", [("layernorm_bias", 96), ("rmsnorm", 100), ("layernorm", 5000)])
def test_interp_norm_eps_of_near_constant_rows(norm, K):
    """Rows whose variance (1e-6; LayerNorm's eps 1e-5) or mean square (2e-6; RMSNorm's eps 1e-6) is of the order of
    the norm's eps, in one chunk and in the loop over K chunks: there eps inside the rsqrt sets the scale (CASES' rows
    have variance ~9, where dropping eps changes nothing fp32 can see)."""
    a, weight, kw = make(2, K, 24, torch.float32, norm=norm)
    a = 1e-3 + 1e-3 * torch.randn(2, K, generator=torch.Generator().manual_seed(1))
    assert dl._config(2, 24, K, a.device)[3] == (K < 1000)
    check(dl.decode_linear(a, weight, **kw, backend="triton"), a, weight, kw, 2e-5)


@needs_child
@pytest.mark.parametrize("K", [64, 5000], ids=["one_chunk", "k_loop"])
def test_interp_row_strides_and_mixed_weight_layouts(K):
    """a and the residual as row slices of wider buffers (only a unit column stride is required: a row stride past
    the width), and SwiGLU's weight2 (N, K) contiguous beside weight the transpose of a (K, N) matrix: each tensor is
    read by its own strides."""
    M, N = (3 if K == 64 else 2), 40  # (3 rows: one chunk; 2: the loop over K chunks)
    a, weight, kw = make(M, K, N, torch.float32, norm="layernorm_bias", act="swiglu", residual=True, kn=True)
    kw["weight2"] = torch.randn(N, K, generator=torch.Generator().manual_seed(2)) * K ** -0.5
    a = F.pad(a, (0, 7))[:, :K]
    kw["residual"] = F.pad(kw["residual"], (0, 5))[:, :N]
    assert a.stride(0) == K + 7 and kw["residual"].stride(0) == N + 5 and weight.stride(0) != kw["weight2"].stride(0)
    assert dl._config(M, N, K, a.device)[3] == (K == 64)
    check(dl.decode_linear(a, weight, **kw, backend="triton"), a, weight, kw, 2e-5)


# ----------------------------------------------------------------------------------------
# CUDA


@needs_cuda
@pytest.mark.parametrize("N,K", [(2304, 768), (768, 3072), (2048, 8192)])  # GPT-2's, LLaMA-1B's down projection
@pytest.mark.parametrize("M", [1, 2, 3, 4])
@pytest.mark.parametrize("act,norm,kn", [("gelu", "layernorm", False), ("swiglu", "rmsnorm", False),
                                         (None, "none", True), (None, "layernorm_bias", True)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cuda_kernel_matches_float64(M, N, K, act, norm, kn, dtype):
    a, weight, kw = make(M, K, N, dtype, norm=norm, act=act, residual=act is None, kn=kn, device="cuda")
    if not dl.serves_rows(M, K, N):  # 3-4 rows of a wide K and a large weight: cuBLAS
        assert M > 2 and dl.decode_linear_backend(a, weight, **kw) == "torch"
        return
    assert dl.decode_linear_backend(a, weight, **kw) == "triton"
    out = dl.decode_linear(a, weight, **kw)
    # bf16: the rounding of the norm's output and the matmul's (as the torch ops round); fp32: sum order only
    check(out, a, weight, kw, 2e-2 if dtype == torch.bfloat16 else 1e-4)
    torch_out = dl.decode_linear(a, weight, **kw, backend="torch")
    assert (out.double() - torch_out.double()).abs().max().item() <= 2e-2 * max(1.0, torch_out.abs().max().item())
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert dl.decode_linear_backend(a, weight, **kw) == "torch"  # autocast decides dtypes: the torch ops


@needs_cuda
@pytest.mark.parametrize("pdl", [True, False])
def test_cuda_chain_in_a_graph_equals_eager(pdl, monkeypatch):
    """A chain of dependent calls (each reads the previous output and a residual two calls back, buffers reused
    by the graph's pool) gives the bits of the same chain launched plainly, one kernel after the other, both eager
    and captured in a CUDA graph and replayed: with programmatic dependent launch a kernel that starts early still
    reads its input only after the previous kernel is done, and writes only after that."""
    g = torch.Generator().manual_seed(3)
    d, hidden = 768, 3072
    norm = LayerNorm(d, bias=True).cuda().bfloat16()
    w_fc = (torch.randn(hidden, d, generator=g) * d ** -0.5).cuda().bfloat16()
    w_proj = (torch.randn(d, hidden, generator=g) * hidden ** -0.5).cuda().bfloat16()
    x = torch.randn(1, d, generator=g).cuda().bfloat16()

    def chain():
        y = x
        for _ in range(12):
            h = dl.decode_linear(y, w_fc, norm=norm, act="gelu")
            y = dl.decode_linear(h, w_proj, residual=y)
        return y

    monkeypatch.setattr(dl, "PDL", False)
    reference = chain()
    monkeypatch.setattr(dl, "PDL", pdl)
    assert dl._pdl(x.device) == (pdl and torch.cuda.get_device_capability()[0] >= 9)
    if pdl:  # eager with PDL against eager without (without: the reference itself, nothing to compare)
        assert torch.equal(chain(), reference)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chain()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain()
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, reference)

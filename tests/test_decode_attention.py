"""
decode_attention.py: the decode kernels and their SDPA fallback against float64 references.

CPU (CI):
  - the SDPA fallback and the Tucker composition vs plain float64 softmax math;
  - which backend 'auto' picks, and the argument errors;
  - the Triton kernels themselves through Triton's interpreter, in a child pytest (tests/interpreted.py).
CUDA (skipped without a GPU): Triton vs SDPA vs float64 at decode sizes (B up to 32, L up to
16k, bf16), and inside a captured CUDA graph replayed at different lengths.
"""
import math

import pytest
import torch

import decode_attention as da
from interpreted import needs_child

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


# ----------------------------------------------------------------------------------------
# float64 references: plain softmax math, nothing shared with the code under test


def rope_cache(dim, max_len, theta, device=None):
    """(cos, sin) tables (max_len, dim/2), angle[p, i] = p * theta^(-2i/dim), as model.rope_cache
    (test_rope_tables_match_model checks that; kept here so these tests do not load the model)."""
    inv_freq = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.outer(torch.arange(max_len, dtype=torch.float64), inv_freq)
    return angles.cos().float().to(device), angles.sin().float().to(device)


def ref_decode(q, k, v, length, scale, rope=None):
    """q (B, nH, Dk), k (B, nG, L, Dk), v (B, nG, L, Dv) -> (B, nH, Dv) in float64."""
    B, nH, Dk = q.shape
    nG, L = k.shape[1:3]
    q, k, v = q.double(), k.double(), v.double()
    if rope is not None:
        cos, sin = (t[:L].double() for t in rope)  # (L, Dk/2): row p rotates key p
        k1, k2 = k[..., : Dk // 2], k[..., Dk // 2:]
        k = torch.cat((k1 * cos - k2 * sin, k1 * sin + k2 * cos), dim=-1)
    qg = q.view(B, nG, nH // nG, Dk)  # (B, nG, group, Dk): head h = g * group + i
    scores = torch.einsum("bgid,bgnd->bgin", qg, k) * scale  # (B, nG, group, L)
    lens = torch.as_tensor(length, device=q.device).reshape(-1).expand(B)
    valid = torch.arange(L, device=q.device)[None, :] < lens[:, None]  # (B, L)
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    o = torch.einsum("bgin,bgnd->bgid", scores.softmax(-1), v)  # (B, nG, group, Dv)
    return o.reshape(B, nH, -1)


def ref_tucker(q_lat, G, k, v, G_post, length, scale, rope=None, q_pos=None):
    B, r3 = q_lat.size(0), G.size(2)
    q = torch.einsum("bj,hjd->bhd", q_lat.double(), G.double())  # (B, nH, r3)
    if rope is not None:
        lens = torch.as_tensor(length, device=q.device).reshape(-1).expand(B)
        pos = (lens - 1) if q_pos is None else torch.as_tensor(q_pos, device=q.device).reshape(-1).expand(B)
        cos, sin = (t.double()[pos][:, None, :] for t in rope)  # (B, 1, r3/2)
        q1, q2 = q[..., : r3 // 2], q[..., r3 // 2:]
        q = torch.cat((q1 * cos - q2 * sin, q1 * sin + q2 * cos), dim=-1)
    o = ref_decode(q, k, v, length, scale, rope)  # (B, nH, p3)
    return torch.einsum("bhd,hpd->bp", o, G_post.double())  # (B, p2)


# ----------------------------------------------------------------------------------------
# Case builder shared by the CPU, interpreter and CUDA tests


def make_case(B, nH, nG, L, Dk, Dv, *, rope=False, kv="separate", lengths="random", dtype=torch.float32,
              device="cpu", seed=0):
    """kv: 'separate' (own v), 'same' (v is k), 'view' (v = k[..., :Dv]), 'strided' (k, v are
    slices of a bigger, head-minor buffer). lengths: 'random' per sequence, 'full', 'one', 'scalar'."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    q = rnd(B, nH, Dk)
    if kv == "same":
        k = rnd(B, nG, L, Dk)
        v = k
    elif kv == "view":
        k = rnd(B, nG, L, Dk)
        v = k[..., :Dv]
    elif kv == "strided":  # (B, L+3, nG, Dk+Dv+8) storage, sliced and transposed: odd strides
        buf = rnd(B, L + 3, nG, Dk + Dv + 8)
        k = buf[:, 1:L + 1, :, :Dk].transpose(1, 2)
        v = buf[:, 1:L + 1, :, Dk + 8:].transpose(1, 2)
    else:
        k, v = rnd(B, nG, L, Dk), rnd(B, nG, L, Dv)
    if lengths == "full":
        length = torch.full((B,), L)
    elif lengths == "one":
        length = torch.ones(B, dtype=torch.int64)
    elif lengths == "scalar":
        length = torch.tensor(max(1, (2 * L) // 3), dtype=torch.int32)
    else:
        length = torch.randint(1, L + 1, (B,), generator=g)
        length[0] = L  # one full and one tiny sequence in every batch
        if B > 1:
            length[1] = 1
    length = length.to(device)
    tables = None
    if rope:
        cos, sin = rope_cache(Dk, L + 5, theta=100.0, device=device)  # a fast theta: all angles matter
        tables = (cos, sin)
    return q, k, v, length, tables


def err(out, ref):
    return (out.double() - ref).abs().max().item()


def rotate_at(x, rope, pos):
    """x (B, n, D) in float64, sequence b rotated to position pos[b] (rotate-half pairs)."""
    D = x.size(-1)
    cos, sin = (t.double()[pos][:, None, :] for t in rope)  # (B, 1, D/2)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def ref_append(q, k, v, length, scale, rope, rope_keys, rotate_q, k_new, v_new):
    """decode_attention with new_kv in float64: the caches after the write (k, v at row length-1 of each
    sequence) and the output. Returns (out, k_after, v_after)."""
    B = q.size(0)
    pos = torch.as_tensor(length).reshape(-1).expand(B) - 1
    q, k_new = q.double(), k_new.double()
    if rotate_q:
        q = rotate_at(q, rope, pos)
    if rope is not None and rope_keys == "stored":
        k_new = rotate_at(k_new, rope, pos)
    k, v = k.double().clone(), v.double().clone()
    shared = v_new is None
    for b in range(B):
        k[b, :, pos[b]] = k_new[b]
        if not shared:
            v[b, :, pos[b]] = v_new[b].double()
    if shared:
        v = k[..., : v.size(-1)]
    return ref_decode(q, k, v, length, scale, rope if rope_keys == "as_read" else None), k, v


def make_append_case(B, nH, nG, L, Dk, Dv, *, rope, kv, lengths, dtype=torch.float32, device="cpu", seed=0):
    """make_case plus the new token's k_new (B, nG, Dk) and v_new (B, nG, Dv) (None for a shared cache);
    the caches hold garbage at each sequence's row length-1 (the call must overwrite it, never read it)."""
    q, k, v, length, tables = make_case(B, nH, nG, L, Dk, Dv, rope=rope, kv=kv, lengths=lengths, dtype=dtype,
                                        device=device, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    k_new = torch.randn(B, nG, Dk, generator=g).to(device=device, dtype=dtype)
    v_new = None if kv in ("same", "view") else torch.randn(B, nG, Dv, generator=g).to(device=device, dtype=dtype)
    pos = length.reshape(-1).expand(B) - 1
    for b in range(B):
        k[b, :, pos[b]] = 1e4  # garbage where the new row goes
        if v_new is not None:
            v[b, :, pos[b]] = -1e4
    return q, k, v, length, tables, k_new, v_new


def check_append(out, k, v, expected, tol):
    """The output and the whole caches after the call against ref_append's."""
    ref, k_ref, v_ref = expected
    assert err(out, ref) < tol
    assert err(k, k_ref) < tol  # the new row written, every other row untouched
    assert err(v, v_ref) < tol


# rope: None, 'as_read' (cache unrotated, a shared latent) or 'stored' (cache of rotated keys); rotate_q with RoPE
APPEND_CASES = [
    # B, nH, nG, L, Dk, Dv, rope, kv, lengths
    (2, 4, 4, 70, 16, 16, None, "separate", "random"),  # MHA, learned positions
    (3, 8, 2, 90, 32, 24, "stored", "separate", "random"),  # GQA with RoPE, Dv != Dk
    (2, 6, 1, 150, 160, 160, "as_read", "same", "random"),  # Tucker / MLA shared latent, RoPE, Dk = 160
    (1, 32, 1, 40, 64, 48, None, "view", "one"),  # v = k[..., :48], length 1: only the new row
    (2, 2, 1, 90, 144, 112, None, "strided", "scalar"),  # odd strides, one length for all
    (2, 12, 1, 130, 64, 64, "stored", "separate", "full"),  # Tucker separate K/V with RoPE, full cache
]


@pytest.mark.parametrize("case", APPEND_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_fallback_appends_and_rotates(case, dtype):
    """new_kv / rope_keys / rotate_q on the fallback: the cache write and the rotations the kernel does."""
    B, nH, nG, L, Dk, Dv, rope, kv, lengths = case
    q, k, v, length, tables, k_new, v_new = make_append_case(B, nH, nG, L, Dk, Dv, rope=rope is not None, kv=kv,
                                                             lengths=lengths, dtype=dtype)
    scale = 1.0 / math.sqrt(Dk)
    expected = ref_append(q, k, v, length, scale, tables, rope, rope is not None, k_new, v_new)
    out = da.decode_attention(q, k, v, length, scale=scale, rope=tables, rope_keys=rope or "as_read",
                              rotate_q=rope is not None, new_kv=(k_new, v_new), backend="sdpa")
    check_append(out, k, v, expected, 1e-5 if dtype == torch.float32 else 5e-2)


# ----------------------------------------------------------------------------------------
# CPU: the SDPA fallback, the dispatch, the argument checks

FALLBACK_CASES = [
    # B, nH, nG, L, Dk, Dv, rope, kv, lengths
    (2, 4, 4, 17, 16, 16, False, "separate", "random"),  # MHA
    (3, 8, 2, 40, 32, 24, True, "separate", "random"),  # GQA, RoPE, Dv != Dk
    (2, 6, 1, 33, 160, 160, True, "same", "scalar"),  # Tucker shared KV, non-power-of-two
    (2, 12, 1, 50, 48, 32, False, "view", "one"),  # v a view of k
    (2, 4, 2, 21, 24, 40, True, "strided", "full"),
]


@pytest.mark.parametrize("case", FALLBACK_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_fallback_matches_float64(case, dtype):
    B, nH, nG, L, Dk, Dv, rope, kv, lengths = case
    q, k, v, length, tables = make_case(B, nH, nG, L, Dk, Dv, rope=rope, kv=kv, lengths=lengths, dtype=dtype)
    scale = 1.0 / math.sqrt(Dk)
    out = da.decode_attention(q, k, v, length, scale=scale, rope=tables, backend="sdpa")
    assert out.shape == (B, nH, Dv) and out.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert err(out, ref_decode(q, k, v, length, scale, tables)) < tol
    # 'auto' on the CPU is the same computation
    auto = da.decode_attention(q, k, v, length, scale=scale, rope=tables)
    torch.testing.assert_close(auto, out, rtol=0, atol=0)


def test_sdpa_fallback_ignores_rows_past_length():
    """Stale rows beyond `length` do not leak into the output. (They must be finite for SDPA, whose
    masked probabilities are exact zeros times the value; the kernel never reads them at all.)"""
    q, k, v, length, tables = make_case(2, 4, 1, 30, 32, 32, rope=True, kv="separate")
    length = torch.tensor([7, 19])
    ref = ref_decode(q, k, v, length, 0.3, tables)
    k[0, :, 7:] = 1e4
    v[1, :, 19:] = -1e4
    out = da.decode_attention(q, k, v, length, scale=0.3, rope=tables, backend="sdpa")
    assert err(out, ref) < 1e-5


def test_rope_tables_match_model():
    """The kernel's RoPE convention is model.py's: same tables, same rotate-half pairs."""
    import model

    cos, sin = model.rope_cache(20, 9, theta=1e4)
    mine = rope_cache(20, 9, theta=1e4)
    torch.testing.assert_close(cos, mine[0])
    torch.testing.assert_close(sin, mine[1])
    x = torch.randn(2, 1, 9, 20, dtype=torch.float64)
    torch.testing.assert_close(da._rotate(x, cos.double(), sin.double()), model.apply_rope(x, cos.double(), sin.double()))
    # da._rotate is model.apply_rope itself: the pairs and signs against this file's rotation (ref_decode's), too
    c, s, x1, x2 = mine[0].double(), mine[1].double(), x[..., :10], x[..., 10:]
    torch.testing.assert_close(model.apply_rope(x, cos.double(), sin.double()),
                               torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1))


def test_tucker_composition_matches_float64():
    B, nH, r2, r3, p2, p3, L = 3, 6, 12, 16, 10, 16, 25
    g = torch.Generator().manual_seed(1)
    q_lat, G, G_post = torch.randn(B, r2, generator=g), torch.randn(nH, r2, r3, generator=g), torch.randn(nH, p2, p3, generator=g)
    k = torch.randn(B, 1, L, r3, generator=g)
    length = torch.tensor([25, 1, 13])
    tables = rope_cache(r3, L, theta=100.0)
    for v, q_pos in ((k, None), (torch.randn(B, 1, L, p3, generator=g), torch.tensor([3, 0, 20]))):
        y = da.tucker_decode_attention(q_lat, G, k, v, G_post, length, scale=0.25, rope=tables, q_pos=q_pos)
        assert y.shape == (B, p2)
        assert err(y, ref_tucker(q_lat, G, k, v, G_post, length, 0.25, tables, q_pos)) < 1e-4


def test_tucker_argument_errors():
    """tucker_decode_attention names what is wrong before any work: q_pos not an int tensor of shape () or (B,)
    (a float position would index the rope tables), mismatched cores, an unknown backend."""
    B, nH, r2, r3, p2, p3, L = 2, 4, 8, 16, 6, 16, 10
    q_lat, G, G_post = torch.randn(B, r2), torch.randn(nH, r2, r3), torch.randn(nH, p2, p3)
    k = torch.randn(B, 1, L, r3)
    length, tables = torch.tensor([10, 4]), rope_cache(r3, L, theta=100.0)
    kw = dict(scale=0.25, rope=tables)
    for q_pos in (torch.tensor([3.0, 1.0]), torch.tensor([3, 1, 0])):
        with pytest.raises(ValueError, match="q_pos must be an int32/int64 tensor"):
            da.tucker_decode_attention(q_lat, G, k, k, G_post, length, q_pos=q_pos, **kw)
    two_heads = torch.randn(B, 2, L, r3)  # Tucker's latent caches have one head (SDPA would split the heads on two)
    for bad in (dict(G_post=G_post[:, :, :8]), dict(k=two_heads, v=two_heads)):
        args = {**dict(q_lat=q_lat, G=G, k=k, v=k, G_post=G_post, length=length), **bad}
        with pytest.raises(ValueError, match="shapes: q_lat"):
            da.tucker_decode_attention(**args, **kw)
    with pytest.raises(ValueError, match="backend must be"):
        da.tucker_decode_attention(q_lat, G, k, k, G_post, length, backend="flash", **kw)


def test_backend_choice_on_cpu():
    q, k, v, length, _ = make_case(2, 4, 1, 8, 16, 16)
    assert da.decode_backend(q, k, v) == "sdpa"
    G = torch.randn(4, 8, 16)
    assert da.tucker_decode_backend(q[:, 0, :8], G, k, v, torch.randn(4, 8, 16)) == "sdpa"
    if not da._interpret():  # a forced kernel on the CPU is an error outside the interpreter
        with pytest.raises(ValueError, match="backend='triton' cannot run"):
            da.decode_attention(q, k, v, length, scale=1.0, backend="triton")
    with pytest.raises(ValueError, match="backend must be"):
        da.decode_attention(q, k, v, length, scale=1.0, backend="flash")


def test_pdl_launches(monkeypatch):
    """Which kernels take programmatic dependent launch: PDL's names (True all, False none), the split kernel also
    where the caller asks (pdl_split), none on a device without it."""
    monkeypatch.setattr(da, "pdl_capable", lambda device: True)
    for pdl, split, expected in ((("combine",), False, (False, True)), (("combine",), True, (True, True)),
                                 (True, False, (True, True)), (False, True, (False, False)), ((), True, (True, False))):
        monkeypatch.setattr(da, "PDL", pdl)
        assert da.pdl_launches(torch.device("cpu"), split) == dict(zip(("split", "combine"), expected)), (pdl, split)
    monkeypatch.setattr(da, "pdl_capable", lambda device: False)
    monkeypatch.setattr(da, "PDL", True)
    assert da.pdl_launches(torch.device("cpu"), True) == {"split": False, "combine": False}


def test_unsupported_shapes_are_named():
    """Shape/dtype reasons come first, so they are testable without a GPU; 'auto' falls back on them."""
    meta = dict(device="meta")
    q, k = torch.empty(2, 64, 512, **meta), torch.empty(2, 1, 10, 512, **meta)
    assert "head dims" in da._unsupported(q, k, k)
    q, k = torch.empty(2, 64, 64, **meta), torch.empty(2, 1, 10, 64, **meta)
    assert "group size" in da._unsupported(q, k, k)
    q = torch.empty(2, 4, 64, device="meta", dtype=torch.float64)
    k = torch.empty(2, 1, 10, 64, device="meta", dtype=torch.float64)
    assert "dtypes" in da._unsupported(q, k, k)
    q, k = torch.empty(2, 32, 256, **meta), torch.empty(2, 1, 10, 256, **meta)
    assert "device meta" in da._unsupported(q, k, k)  # the shape itself is supported
    q, k, v = torch.empty(2, 4, 64, **meta), torch.empty(2, 1, 10, 64, **meta), torch.empty(2, 1, 10, 512, **meta)
    assert "head dims" in da._unsupported(q, k, v)  # the values' width too


def test_kernel_conditions_under_the_interpreter(monkeypatch):
    """With the CPU counted as a Triton device (TRITON_INTERPRET=1): 'auto' still takes SDPA on the CPU (the
    interpreter is for tests that force the kernel), other devices stay refused, and the fused Tucker kernel takes
    output cores of up to MAX_HEAD_DIM rows in q_lat's dtype."""
    monkeypatch.setattr(da, "_interpret", lambda: True)
    assert da.device_problem(torch.device("cpu"), True) is None
    assert "device meta" in da.device_problem(torch.device("meta"), True)
    q, k, v, length, _ = make_case(2, 4, 1, 8, 16, 16)
    assert da.decode_backend(q, k, v) == "sdpa"
    B, nH, r2, r3 = 2, 4, 8, 16
    q_lat, G = torch.randn(B, r2), torch.randn(nH, r2, r3)
    assert da.tucker_decode_backend(q_lat, G, k, k, torch.randn(nH, 8, 16)) == "sdpa"
    if da._triton_available():
        assert da._unsupported(q, k, v) is None
        assert da._tucker_unsupported(q_lat, G, k, k, torch.randn(nH, da.MAX_HEAD_DIM, 16)) is None
        assert "p2 = 257" in da._tucker_unsupported(q_lat, G, k, k, torch.randn(nH, da.MAX_HEAD_DIM + 1, 16))
        assert "dtype or device" in da._tucker_unsupported(q_lat, G.double(), k, k, torch.randn(nH, 8, 16))


@pytest.mark.parametrize("bad, says", [("groups", "multiple of the KV heads"), ("rope_odd", "with Dk even"),
                                       ("rope_short", r"rope tables must be \(>= L=10"),
                                       ("length_shape", "shape \\(\\) or \\(B,\\)"), ("length_float", "int32/int64"),
                                       ("stride", "unit stride"), ("key_width", "shape mismatch"),
                                       ("value_rows", "shape mismatch"), ("value_heads", "shape mismatch")])
def test_argument_errors(bad, says):
    q, k, v, length, tables = make_case(2, 4, 2, 10, 16, 16, rope=True)
    kw = dict(scale=1.0, rope=tables, backend="sdpa")
    if bad == "groups":
        q = torch.randn(2, 3, 16)
    elif bad == "rope_odd":
        q, k, v = q[..., :15], k[..., :15], v[..., :15]
    elif bad == "rope_short":
        kw["rope"] = (tables[0][:5], tables[1][:5])
    elif bad == "length_shape":
        length = torch.tensor([1, 2, 3])
    elif bad == "length_float":
        length = length.float()
    elif bad == "stride":
        k = k.transpose(2, 3).contiguous().transpose(2, 3)
    elif bad == "key_width":  # k's rows narrower than q's
        k = k[..., :14]
    elif bad == "value_rows":  # v of another capacity than k
        v = v[:, :, :9]
    elif bad == "value_heads":  # v of fewer KV heads than k (SDPA would broadcast it)
        v = v[:, :1]
    with pytest.raises(ValueError, match=says):
        da.decode_attention(q, k, v, length, **kw)


def test_stored_keys_need_table_rows_only_up_to_the_position():
    """rope_keys='stored' reads the tables at length - 1 only: a cache longer than the tables is fine (a decoder made
    with max_len > block_size), while keys rotated as read need a row for every cache row."""
    q, k, v, length, tables, k_new, v_new = make_append_case(2, 4, 2, 40, 16, 16, rope=True, kv="separate",
                                                             lengths="random")
    length = torch.tensor([30, 7])
    short = (tables[0][:30], tables[1][:30])
    expected = ref_append(q, k, v, length, 0.25, short, "stored", True, k_new, v_new)
    out = da.decode_attention(q, k, v, length, scale=0.25, rope=short, rope_keys="stored", rotate_q=True,
                              new_kv=(k_new, v_new), backend="sdpa")
    check_append(out, k, v, expected, 1e-5)
    with pytest.raises(ValueError, match="rope tables"):
        da.decode_attention(q, k, v, length, scale=0.25, rope=short, backend="sdpa")  # as read: 40 rows needed


@pytest.mark.parametrize("bad", ["rope_keys", "rotate_without_rope", "key_shape", "value_shape", "value_for_shared",
                                 "no_value", "shared_stored", "not_a_pair"])
def test_append_argument_errors(bad):
    q, k, v, length, tables, k_new, v_new = make_append_case(2, 4, 2, 10, 16, 16, rope=True, kv="separate",
                                                             lengths="random")
    kw = dict(scale=1.0, rope=tables, rope_keys="stored", rotate_q=True, new_kv=(k_new, v_new), backend="sdpa")
    match = "new_kv"
    if bad == "rope_keys":
        kw["rope_keys"], match = "rotated", "rope_keys"
    elif bad == "rotate_without_rope":
        kw["rope"], match = None, "rotate_q"
    elif bad == "key_shape":
        kw["new_kv"] = (k_new[:, :1], v_new)
    elif bad == "value_shape":
        kw["new_kv"] = (k_new, v_new[..., :8])
    elif bad == "value_for_shared":
        v = k
    elif bad == "no_value":
        kw["new_kv"] = (k_new, None)
    elif bad == "shared_stored":
        v, kw["new_kv"], match = k, (k_new, None), "as_read"
    elif bad == "not_a_pair":
        kw["new_kv"] = k_new
    with pytest.raises(ValueError, match=match):
        da.decode_attention(q, k, v, length, **kw)


def test_num_splits_is_static():
    """The grid depends on B, nG, L and the SM count only, within [1, MAX_SPLITS]."""
    for B, nG, L in [(1, 1, 16384), (32, 1, 16384), (32, 8, 100), (1, 1, 1), (4096, 32, 16384)]:
        s = da.num_splits(B, nG, L, "cpu")
        assert 1 <= s <= da.MAX_SPLITS and s <= max(1, -(-L // da.MIN_SPLIT_TOKENS))


def test_num_splits_finer_where_one_kv_head_serves_many_heads(monkeypatch):
    """At batch 1 the split minimum binds: MIN_SPLIT_TOKENS rows a split, MIN_SPLIT_TOKENS_WIDE where a KV head
    serves WIDE_GROUP or more query heads (LLaMA-1B's Tucker and MQA: 32); at batch 32 the program count binds."""
    monkeypatch.setattr(da, "INTERPRET_SMS", 132)  # an H200's SM count (the CPU device stands in for the GPU) ...
    monkeypatch.setattr(da, "_sm_count", lambda device: 132)  # ... also past _sm_count's cache
    L, wide = 4096, da.WIDE_GROUP
    assert da.num_splits(1, 1, L, "cpu", da.BLOCK_N, group=32) == L // da.MIN_SPLIT_TOKENS_WIDE == 32
    assert da.num_splits(1, 1, L, "cpu", da.BLOCK_N, group=wide) == L // da.MIN_SPLIT_TOKENS_WIDE
    assert da.num_splits(1, 1, L, "cpu", da.BLOCK_N, group=wide - 1) == L // da.MIN_SPLIT_TOKENS == 16
    assert da.num_splits(1, 8, L, "cpu", da.BLOCK_N, group=4) == L // da.MIN_SPLIT_TOKENS  # GQA-8's groups of 4
    assert da.num_splits(32, 1, L, "cpu", da.BLOCK_N, group=32) == da.num_splits(32, 1, L, "cpu", da.BLOCK_N) == 16


# ----------------------------------------------------------------------------------------
# The kernels through Triton's interpreter (tests/test_interpreted.py runs these in its child process)


@pytest.fixture
def poisoned(monkeypatch):
    """Kernel workspaces and outputs start as NaN: anything read that was not written shows."""
    monkeypatch.setattr(da, "_empty", lambda shape, device, dtype: torch.full(shape, float("nan"), device=device, dtype=dtype))


INTERP_CASES = [
    # B, nH, nG, L, Dk, Dv, rope, kv, lengths
    (2, 4, 1, 100, 32, 32, False, "separate", "random"),  # MQA, empty splits for the short sequence
    (2, 6, 1, 150, 160, 160, True, "same", "random"),  # Tucker/MLA shared latent, RoPE, Dk = 160
    (3, 8, 2, 70, 24, 40, False, "separate", "scalar"),  # GQA, tiny odd dims, scalar length
    (2, 4, 4, 64, 16, 16, True, "separate", "full"),  # MHA: group size 1
    (1, 32, 1, 40, 64, 48, True, "view", "one"),  # 32 heads on one latent, v = k[..., :48], length 1
    (2, 2, 1, 90, 144, 112, False, "strided", "random"),  # odd strides, Dk = 128 + 16, Dv = 64 + 48
]


@needs_child
@pytest.mark.parametrize("case", INTERP_CASES)
def test_interp_kernel_matches_float64(case, poisoned):
    B, nH, nG, L, Dk, Dv, rope, kv, lengths = case
    q, k, v, length, tables = make_case(B, nH, nG, L, Dk, Dv, rope=rope, kv=kv, lengths=lengths)
    scale = 1.0 / math.sqrt(Dk)
    out = da.decode_attention(q, k, v, length, scale=scale, rope=tables, backend="triton")
    assert out.shape == (B, nH, Dv) and out.dtype == q.dtype
    assert err(out, ref_decode(q, k, v, length, scale, tables)) < 2e-5


@needs_child
@pytest.mark.parametrize("rope_fp32", [True, False])
def test_interp_kernel_fp16_and_garbage_past_length(poisoned, monkeypatch, rope_fp32):
    monkeypatch.setattr(da, "ROPE_FP32", rope_fp32)
    q, k, v, length, tables = make_case(3, 8, 1, 80, 64, 64, rope=True, kv="same", dtype=torch.float16)
    ref = ref_decode(q, k, v, length, 0.125, tables)
    k[1, :, length[1]:] = float("nan")  # beyond length nothing may be read into the result
    k[2, :, length[2]:] = float("inf")
    out = da.decode_attention(q, k, v, length, scale=0.125, rope=tables, backend="triton")
    assert out.dtype == torch.float16
    sdpa_err = err(da.decode_attention(q, k.nan_to_num(0, 0, 0), v.nan_to_num(0, 0, 0), length, scale=0.125,
                                       rope=tables, backend="sdpa"), ref)
    assert err(out, ref) < max(2 * sdpa_err, 2e-3)


@needs_child
def test_interp_one_split_and_many_splits(monkeypatch):
    """The same answer whatever the number of splits (1, some empty, one block each) and RoPE mode."""
    q, k, v, length, tables = make_case(2, 4, 1, 120, 32, 32, rope=True, kv="same")
    ref = ref_decode(q, k, v, length, 0.2, tables)
    for sms, mode in ((1, "q_base"), (64, "k_angle"), (3, "rows")):
        monkeypatch.setattr(da, "INTERPRET_SMS", sms)
        monkeypatch.setattr(da, "MIN_SPLIT_TOKENS", 16)
        monkeypatch.setattr(da, "ROPE_MODE", mode)  # every way of reading the tables
        assert err(da.decode_attention(q, k, v, length, scale=0.2, rope=tables, backend="triton"), ref) < 2e-5


@needs_child
@pytest.mark.parametrize("case", APPEND_CASES)
def test_interp_kernel_appends_and_rotates(case, poisoned):
    """new_kv written by the kernel into row length-1 (never read from the cache), q and the new key rotated
    in it: the output and the caches against float64."""
    B, nH, nG, L, Dk, Dv, rope, kv, lengths = case
    q, k, v, length, tables, k_new, v_new = make_append_case(B, nH, nG, L, Dk, Dv, rope=rope is not None, kv=kv,
                                                             lengths=lengths)
    scale = 1.0 / math.sqrt(Dk)
    expected = ref_append(q, k, v, length, scale, tables, rope, rope is not None, k_new, v_new)
    out = da.decode_attention(q, k, v, length, scale=scale, rope=tables, rope_keys=rope or "as_read",
                              rotate_q=rope is not None, new_kv=(k_new, v_new), backend="triton")
    check_append(out, k, v, expected, 2e-5)


@needs_child
@pytest.mark.parametrize("rope", [None, "as_read", "stored"])
def test_interp_append_at_split_and_block_edges(rope, monkeypatch):
    """The new row at the first and last row of a block and of a split, with many splits (some empty)."""
    monkeypatch.setattr(da, "INTERPRET_SMS", 64)
    monkeypatch.setattr(da, "MIN_SPLIT_TOKENS", 16)
    lens = [1, 2, 63, 64, 65, 66, 128, 129, 193, 200]
    B, L = len(lens), 200
    kv = "same" if rope == "as_read" else "separate"
    q, k, v, length, tables, k_new, v_new = make_append_case(B, 4, 1, L, 32, 32, rope=rope is not None, kv=kv,
                                                             lengths="full", seed=3)
    length = torch.tensor(lens)
    k_new = k_new.clone()
    for b, n in enumerate(lens):  # the new row's position differs from make_append_case's: garbage there too
        k[b, :, n - 1] = 1e4
    expected = ref_append(q, k, v, length, 0.2, tables, rope, rope is not None, k_new, v_new)
    out = da.decode_attention(q, k, v, length, scale=0.2, rope=tables, rope_keys=rope or "as_read",
                              rotate_q=rope is not None, new_kv=(k_new, v_new), backend="triton")
    check_append(out, k, v, expected, 2e-5)


TUCKER_CASES = [
    # B, nH, r2, r3, p2, p3, L, rope, shared, q_pos
    (2, 4, 16, 32, 16, 32, 100, True, True, False),
    (3, 6, 24, 40, 20, 24, 60, True, False, True),
    (2, 3, 8, 160, 24, 160, 50, False, True, False),
]


@needs_child
@pytest.mark.parametrize("case", TUCKER_CASES)
@pytest.mark.parametrize("qcore", ["dot", "bcast"])
def test_interp_tucker_fused_matches_float64(case, qcore, poisoned, monkeypatch):
    monkeypatch.setattr(da, "TUCKER_QCORE", qcore)
    B, nH, r2, r3, p2, p3, L, rope, shared, with_q_pos = case
    g = torch.Generator().manual_seed(2)
    q_lat = torch.randn(B, r2, generator=g)
    G = torch.randn(nH, r2, r3, generator=g) / math.sqrt(r2)
    G_post = torch.randn(nH, p2, p3, generator=g) / math.sqrt(p3)
    k = torch.randn(B, 1, L, r3, generator=g)
    v = k[..., :p3] if shared else torch.randn(B, 1, L, p3, generator=g)
    length = torch.randint(1, L + 1, (B,), generator=g)
    q_pos = torch.randint(0, L, (B,), generator=g) if with_q_pos else None
    tables = rope_cache(r3, L, theta=100.0) if rope else None
    y = da.tucker_decode_attention(q_lat, G, k, v, G_post, length, scale=0.2, rope=tables, q_pos=q_pos,
                                   backend="triton")
    assert y.shape == (B, p2)
    assert err(y, ref_tucker(q_lat, G, k, v, G_post, length, 0.2, tables, q_pos)) < 5e-5


@needs_child
def test_interp_tucker_fused_many_splits_and_query_core_chunks(poisoned, monkeypatch):
    """The fused Tucker kernel with several splits a sequence, some empty (77 rows of 200: two splits of four), and
    r2 = 56 in four chunks of the 'dot' query-core loop: the combine weighs each split's normalized, projected partial
    by its share 2^(m_s - max m) l_s, an empty split's partial is 0 at weight 0, and each (head, r2 chunk) step adds
    to its own head's query (as many chunks as heads: a loop that took step t for head t % heads would give each head
    one chunk). TUCKER_CASES run one split and one r2 chunk."""
    monkeypatch.setattr(da, "TUCKER_QCORE", "dot")
    monkeypatch.setattr(da, "TUCKER_QCORE_BLOCK_J", 16)
    monkeypatch.setattr(da, "MIN_SPLIT_TOKENS", 16)
    B, nH, r2, r3, p2, p3, L = 2, 4, 56, 32, 12, 24, 200  # r2: four chunks of 16 (the last partial) for 4 heads
    assert da.num_splits(B, 1, L, "cpu", da.BLOCK_N) == 4  # one block of 64 rows each
    g = torch.Generator().manual_seed(5)
    q_lat = torch.randn(B, r2, generator=g)
    G = torch.randn(nH, r2, r3, generator=g) / math.sqrt(r2)
    G_post = torch.randn(nH, p2, p3, generator=g) / math.sqrt(p3)
    k, v = torch.randn(B, 1, L, r3, generator=g), torch.randn(B, 1, L, p3, generator=g)
    length = torch.tensor([200, 77])
    tables = rope_cache(r3, L, theta=100.0)
    y = da.tucker_decode_attention(q_lat, G, k, v, G_post, length, scale=0.3, rope=tables, backend="triton")
    assert err(y, ref_tucker(q_lat, G, k, v, G_post, length, 0.3, tables)) < 5e-5


@needs_child
def test_interp_scores_beyond_exp2_range_and_combine_column_blocks(poisoned, monkeypatch):
    """Softmax is shift-invariant, and so must the kernels be for scores far outside exp2's range (base 2, fp32: 2^-149
    .. 2^128): sequence 1's every score ~200 below 0, so the combine's padded split slot may not count as m = 0 (every
    weight would underflow); sequence 0's row 0 ~200 above the rest of its split, so the running max must carry over
    the split's later block (2^200 overflows). Three splits of two blocks each (a padded slot in the combine's tile of
    four), and a combine of three column blocks (Dv = 40 in tiles of 16; on a GPU: 32 splits or more and Dv > 128)."""
    monkeypatch.setattr(da, "MIN_SPLIT_TOKENS", 128)
    monkeypatch.setattr(da, "COMBINE_TILE", 64)
    B, nH, L, Dk, Dv = 2, 4, 384, 32, 40
    assert da.num_splits(B, 1, L, "cpu", da.BLOCK_N) == 3
    q, k, v, _, _ = make_case(B, nH, 1, L, Dk, Dv)
    length = torch.tensor([L, 300])
    scale = 1.0 / math.sqrt(Dk)
    q[..., :2] = 28.0  # 28 * 28 * scale = 139 nats = 200 in base 2, exact in fp32
    k[..., 0] = -28.0  # every score down by 200 (base 2), the other 30 columns' scores ~N(0, 1) nats on top
    k[..., 1] = 0.0
    k[0, :, 0, 1] = 28.0  # sequence 0's row 0 back up to ~0
    out = da.decode_attention(q, k, v, length, scale=scale, backend="triton")
    ref = ref_decode(q, k, v, length, scale)
    assert (ref[0] - v[0, 0, 0].double()).abs().max() < 1e-6  # sequence 0: row 0 takes all the weight
    assert err(out, ref) < 1e-4  # fp32 scores of magnitude ~200 carry ~1e-5 of rounding


# ----------------------------------------------------------------------------------------
# CUDA: the compiled kernels at decode sizes

CUDA_CASES = [
    # B, nH, nG, L, Dk, Dv, rope, kv
    (1, 12, 1, 1024, 64, 64, True, "same"),  # Tucker shared KV (r3 = 64)
    (32, 12, 1, 16384, 64, 64, True, "same"),
    (32, 32, 1, 16384, 128, 128, True, "same"),  # MQA-like latent of 128, 32 heads
    (32, 16, 1, 16384, 160, 128, False, "view"),  # absorbed MLA decoupled: [c_kv 128 | k_rope 32]
    (8, 32, 8, 4096, 128, 128, False, "separate"),  # GQA
    (4, 12, 12, 2048, 64, 64, False, "separate"),  # MHA (group size 1)
    (32, 12, 1, 16384, 64, 64, False, "separate"),  # Tucker separate KV
    (3, 8, 2, 999, 256, 256, True, "strided"),
]


def cuda_check(out, q, k, v, length, scale, tables):
    ref = ref_decode(q, k, v, length, scale, tables)
    sdpa = da.decode_attention(q, k, v, length, scale=scale, rope=tables, backend="sdpa")
    e_kernel, e_sdpa = err(out, ref), err(sdpa, ref)
    assert e_kernel <= 2 * e_sdpa + 2e-3, (e_kernel, e_sdpa)


@needs_cuda
@pytest.mark.parametrize("case", CUDA_CASES)
def test_cuda_kernel_matches_sdpa_and_float64(case, poisoned):
    B, nH, nG, L, Dk, Dv, rope, kv = case
    q, k, v, length, tables = make_case(B, nH, nG, L, Dk, Dv, rope=rope, kv=kv, dtype=torch.bfloat16, device="cuda")
    assert da.decode_backend(q, k, v) == "triton"
    scale = 1.0 / math.sqrt(Dk)
    out = da.decode_attention(q, k, v, length, scale=scale, rope=tables)
    assert out.shape == (B, nH, Dv) and out.dtype == torch.bfloat16
    cuda_check(out, q, k, v, length, scale, tables)


CUDA_APPEND_CASES = [
    # B, nH, nG, L, Dk, Dv, rope, kv
    (1, 12, 12, 4096, 64, 64, None, "separate"),  # GPT-2 MHA, batch 1
    (32, 12, 1, 16384, 64, 64, "as_read", "same"),  # Tucker shared K/V, RoPE
    (32, 12, 1, 16384, 64, 64, "stored", "separate"),  # Tucker separate K/V, RoPE
    (4, 32, 8, 4096, 64, 64, "stored", "separate"),  # LLaMA-3 1B GQA-8
    (32, 16, 1, 16384, 160, 128, None, "view"),  # absorbed MLA decoupled [128 | 32]
]


@needs_cuda
@pytest.mark.parametrize("case", CUDA_APPEND_CASES)
def test_cuda_kernel_appends_and_rotates(case, poisoned):
    """new_kv, rotate_q and rope_keys on the GPU: the output against float64 (within twice the SDPA
    fallback's error) and the caches after the call against the fallback's."""
    B, nH, nG, L, Dk, Dv, rope, kv = case
    q, k, v, length, tables, k_new, v_new = make_append_case(B, nH, nG, L, Dk, Dv, rope=rope is not None, kv=kv,
                                                             lengths="random", dtype=torch.bfloat16, device="cuda")
    scale = 1.0 / math.sqrt(Dk)
    expected = ref_append(q, k, v, length, scale, tables, rope, rope is not None, k_new, v_new)
    k2 = k.clone()
    v2 = k2 if kv == "same" else (k2[..., :Dv] if kv == "view" else v.clone())
    kw = dict(scale=scale, rope=tables, rope_keys=rope or "as_read", rotate_q=rope is not None, new_kv=(k_new, v_new))
    out = da.decode_attention(q, k, v, length, **kw)
    sdpa = da.decode_attention(q, k2, v2, length, **kw, backend="sdpa")
    e_kernel, e_sdpa = err(out, expected[0]), err(sdpa, expected[0])
    assert e_kernel <= 2 * e_sdpa + 2e-3, (e_kernel, e_sdpa)
    torch.testing.assert_close(k, k2, rtol=0, atol=0.02)  # the rotated key: fp32 products, one bf16 rounding
    torch.testing.assert_close(v, v2, rtol=0, atol=0)


@needs_cuda
def test_cuda_graph_appends_step_after_step():
    """A captured call with new_kv replayed as a decode loop: each replay writes its own row (length - 1) and attends
    to it (the output within twice the SDPA fallback's error from float64, plus 2e-3, as cuda_check: a bound of 3e-2
    let a kernel that skipped the new row pass at 700 rows)."""
    B, nH, L, D = 4, 12, 1024, 64
    q, k, v, length, tables, k_new, _ = make_append_case(B, nH, 1, L, D, D, rope=True, kv="same", lengths="full",
                                                         dtype=torch.bfloat16, device="cuda")
    length = torch.full((B,), 100, device="cuda")
    kw = dict(scale=0.125, rope=tables, rotate_q=True, new_kv=(k_new, None))
    da.decode_attention(q, k, v, length, **kw)  # compile outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        da.decode_attention(q, k, v, length, **kw)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = da.decode_attention(q, k, v, length, **kw)
    for n in (101, 102, 103, 700):
        length.fill_(n)
        q.normal_()
        k_new.normal_()
        expected = ref_append(q, k, k, length, 0.125, tables, "as_read", True, k_new, None)
        k2 = k.clone()
        sdpa = da.decode_attention(q, k2, k2, length, **kw, backend="sdpa")  # the fallback on a copy of the cache
        graph.replay()
        torch.cuda.synchronize()
        e_kernel, e_sdpa = err(out, expected[0]), err(sdpa, expected[0])
        assert e_kernel <= 2 * e_sdpa + 2e-3, (n, e_kernel, e_sdpa)
        assert err(k, expected[1]) < 2e-2  # row n - 1 written, rows before it as they were
        torch.testing.assert_close(k, k2, rtol=0, atol=0)  # the same row written as the fallback writes it


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_cuda_kernel_other_dtypes(dtype):
    q, k, v, length, tables = make_case(4, 16, 2, 3000, 128, 128, rope=True, kv="same", dtype=dtype, device="cuda")
    out = da.decode_attention(q, k, v, length, scale=0.1, rope=tables, backend="triton")
    ref = ref_decode(q, k, v, length, 0.1, tables)
    assert err(out, ref) < (1e-4 if dtype == torch.float32 else 5e-3)


@needs_cuda
@pytest.mark.parametrize("per_sequence", [False, True])
def test_cuda_graph_replays_at_new_lengths(per_sequence):
    """One captured graph serves every position: only `length` changes between replays."""
    B, nH, L, D = 8, 16, 4096, 128
    q, k, v, length, tables = make_case(B, nH, 1, L, D, D, rope=True, kv="same", dtype=torch.bfloat16, device="cuda")
    length = (torch.full((B,), 100, device="cuda") if per_sequence else torch.tensor(100, device="cuda"))
    out = da.decode_attention(q, k, v, length, scale=0.1, rope=tables)  # compile outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        da.decode_attention(q, k, v, length, scale=0.1, rope=tables)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = da.decode_attention(q, k, v, length, scale=0.1, rope=tables)
    news = ([1, L, 2049] if not per_sequence else
            [torch.randint(1, L + 1, (B,)).tolist(), [L] * B, list(range(1, B + 1))])
    for new in news:
        length.copy_(torch.as_tensor(new, device="cuda"))
        q.normal_()
        graph.replay()
        torch.cuda.synchronize()
        cuda_check(out, q, k, v, length, 0.1, tables)


@needs_cuda
@pytest.mark.parametrize("shared", [True, False])
def test_cuda_tucker_fused(shared):
    B, nH, r2, r3, p2, p3, L = 32, 12, 64, 64, 64, 64, 16384
    g = torch.Generator().manual_seed(3)
    dev, dt = "cuda", torch.bfloat16
    q_lat = torch.randn(B, r2, generator=g).to(dev, dt)
    G = (torch.randn(nH, r2, r3, generator=g) / math.sqrt(r2)).to(dev, dt)
    G_post = (torch.randn(nH, p2, p3, generator=g) / math.sqrt(p3)).to(dev, dt)
    k = torch.randn(B, 1, L, r3, generator=g).to(dev, dt)
    v = k if shared else torch.randn(B, 1, L, p3, generator=g).to(dev, dt)
    length = torch.randint(1, L + 1, (B,), generator=g).to(dev)
    tables = rope_cache(r3, L, theta=1e4, device=dev)
    assert da.tucker_decode_backend(q_lat, G, k, v, G_post) == "triton"
    y = da.tucker_decode_attention(q_lat, G, k, v, G_post, length, scale=0.125, rope=tables)
    y_sdpa = da.tucker_decode_attention(q_lat, G, k, v, G_post, length, scale=0.125, rope=tables, backend="sdpa")
    ref = ref_tucker(q_lat, G, k, v, G_post, length, 0.125, tables)
    assert err(y, ref) <= 2 * err(y_sdpa, ref) + 5e-3, (err(y, ref), err(y_sdpa, ref))


def test_shared_memory_reads_the_device_then_the_table_by_capability(monkeypatch):
    """decode_attention.shared_memory: torch's two fields where the properties have them (an H200's numbers), else
    the table by compute capability (an RTX 4090's sm_89: 100 KB an SM, all but 1 KB a program; a V100's sm_70: 96
    KB, all of it a program, no reserve before sm_80), else 48 KB (a Pascal GPU's sm_61, not in the table); a bare
    'cuda' is the current GPU; each GPU read once."""
    from types import SimpleNamespace
    props = {0: SimpleNamespace(major=9, minor=0, shared_memory_per_block_optin=232448,
                                shared_memory_per_multiprocessor=233472),
             1: SimpleNamespace(major=8, minor=9), 2: SimpleNamespace(major=7, minor=0),
             3: SimpleNamespace(major=6, minor=1)}
    reads = []
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: reads.append(i) or props[i])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    da._shared_memory.cache_clear()
    try:
        assert da.shared_memory(torch.device("cuda", 0)) == (232448, 233472)
        assert da.shared_memory(torch.device("cuda")) == (101376, 102400)  # the current GPU, 1
        assert da.shared_memory(torch.device("cuda", 1)) == (101376, 102400)
        assert da.shared_memory(torch.device("cuda", 2)) == (96 * 1024, 96 * 1024)
        assert da.shared_memory(torch.device("cuda", 3)) == (48 * 1024, 48 * 1024)
        assert reads == [0, 1, 2, 3]
    finally:
        da._shared_memory.cache_clear()


def test_pipelines_loads_by_compute_capability(monkeypatch):
    """decode_attention.pipelines_loads: Triton multi-buffers loads from sm_80 on (A100, RTX 30xx and later), not on
    a V100 or T4 (sm_70 / sm_75), which decode_wide's and the MLA key kernel's shared memory estimates follow; the
    CPU counts as pipelined (the sm_80+ accounting); a bare 'cuda' is the current GPU; each GPU read once. The 1 KB
    the system reserves a program (program_reserve) likewise from sm_80 on only."""
    caps = {0: (9, 0), 1: (7, 5), 2: (8, 0), 3: (7, 0)}
    reads = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: reads.append(i) or caps[i])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    da._capability_major.cache_clear()
    try:
        assert da.pipelines_loads(torch.device("cpu"))
        assert da.pipelines_loads(torch.device("cuda", 0))
        assert not da.pipelines_loads(torch.device("cuda"))  # the current GPU, 1: a T4
        assert not da.pipelines_loads("cuda:1")
        assert da.pipelines_loads(torch.device("cuda", 2))
        assert not da.pipelines_loads(torch.device("cuda", 3))
        assert [da.program_reserve(torch.device("cuda", i)) for i in range(4)] == [1024, 0, 1024, 0]
        assert [da.pipelined_loads(major) for major in (7, 8, 9, 10, 12)] == [False, True, True, True, True]
        assert reads == [0, 1, 2, 3]
    finally:
        da._capability_major.cache_clear()

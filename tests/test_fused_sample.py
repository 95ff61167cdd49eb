"""fused_sample: the sampled decode token (top-k threshold, Gumbel-max draw, finite flag) in a few Triton kernels.

Greedy decoding's token (fused_sample.argmax) is torch.argmax's on every row: ties within and across blocks (the
first id), -0 and +0 (equal), nans (the first nan), infinities, all -inf, a partial last block, views.

Properties of the draw, each against model.sample_next's torch form (backend='torch') on the same logits and noise: the kernel's
token is an argmax of the torch form's float32 scores (on CUDA bit for bit, so the same token wherever that max is
unique); its kept set is torch's top-k set, ties at the k-th value included (checked by boosting one id's noise: the
draw takes it exactly when it is kept); its finite flag is the torch form's for rows with nan, +inf and all -inf
logits; the same generator gives the same tokens through sample_next with either backend, and leaves it in the same
state; the block size does not change the result. CPU: the kernel through Triton's
interpreter (tests/interpreted.py), and dispatch and errors; CUDA (skipped without a GPU): the real vocabulary in
bf16 / fp16 / fp32, draws following the top-k softmax, and the default dispatch.
"""
import pytest
import torch
import torch.nn.functional as F

import fused_sample as fs
from interpreted import needs_child
from model import gumbel_scores, sample_next

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


def tied_logits(B: int, V: int, dtype, device="cpu", seed=0) -> torch.Tensor:
    """Logits on a coarse grid (many ties, the k-th value among them), negative and positive, both zeros."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(B, V, generator=g) * 4).round() / 2
    x[:, ::7] = -0.0
    return x.to(dtype).to(device)


def check_draw(logits, temperature, top_k, exact: bool):
    """Draw with the kernel and check its token against the torch form's scores on the same noise."""
    g = torch.Generator(device=logits.device).manual_seed(7)
    q = torch.empty(logits.shape, dtype=torch.float32, device=logits.device).exponential_(1, generator=g)
    finite = torch.ones((), dtype=torch.bool, device=logits.device)
    kernel_best = torch.full((logits.size(0),), float("nan"), device=logits.device)
    token = fs.draw(logits, q, temperature, top_k, finite, kernel_best)
    scores = gumbel_scores(logits, q, temperature, top_k)
    best = scores.max(dim=-1).values
    got = scores.gather(1, token[:, None])[:, 0]
    assert finite.item() and token.dtype == torch.long
    if exact:  # the same float32 ops: the kernels' own winning score is torch's maximum bit for bit, at torch's token
        assert torch.equal(kernel_best, best) and torch.equal(got, best)
        unique = (scores == best[:, None]).sum(dim=-1) == 1
        assert torch.equal(token[unique], scores.argmax(dim=-1)[unique])
    else:  # the interpreter's log is numpy's, torch's CPU log may differ in the last bit
        tol = 1e-6 * best.abs() + 1e-6
        assert ((best - got) <= tol).all() and ((kernel_best - best).abs() <= tol).all()
    return token


def check_kept_set(logits, top_k, near: int = 0):
    """Row j of a batch boosts id j's noise (q tiny: +69 on its score): the draw takes id j exactly when it is in the
    kept set, else some other kept id. The kept set must be torch's: logits >= the k-th largest value. Every id,
    or (near > 0) the `near` ids on each side of the k-th in sorted order (the interpreter's budget)."""
    B, V = logits.shape
    assert B == 1
    kth = torch.topk(logits[0].float(), top_k).values[-1] if top_k is not None and top_k < V else -float("inf")
    ids = torch.arange(V, device=logits.device)
    if near:  # `near` ids on each side of the k-th in sorted order (ties with it after it too), the `near` largest below
        values, order = torch.sort(logits[0].float(), descending=True, stable=True)
        k = min(top_k or V, V)
        below = order[values < kth]
        ids = torch.cat([order[max(0, k - near):k + near], below[:near]]).unique()
    rows = logits.expand(len(ids), V).contiguous()  # (n, V): one row per boosted id
    q = torch.ones(len(ids), V, device=logits.device)
    q[torch.arange(len(ids), device=logits.device), ids] = 1e-30
    finite = torch.ones((), dtype=torch.bool, device=logits.device)
    token = fs.draw(rows, q, 0.8, top_k, finite)
    kept = token == ids
    assert torch.equal(kept, logits[0, ids].float() >= kth)
    assert near or int(kept.sum()) >= min(top_k or V, V)
    assert kept.any() and (kept.all() == bool((logits[0].float() >= kth).all()))  # never vacuous


def check_first_id_on_tied_scores(device, V=3000, top_ks=(None, 3, 2000)):
    """Equal winning scores in several blocks (noise all 1, so the score is the logit's): the first such id wins, as
    torch's max returns it; row 0 with its maxima at the ids given (in later blocks only, for some), row 1 with all
    but those ids tied at its maximum (a tie across every block)."""
    for maxima in ((0, V // 3, V - 1), (V // 3, V - 1), (V - 1,), (V // 10, V // 10 + 1)):
        logits = torch.zeros(2, V, device=device)
        logits[:, list(maxima)] = 5.0
        logits[1] = -logits[1]  # row 1: every id but the maxima' ties at 0, the largest
        for top_k in top_ks:
            token = fs.draw(logits, torch.ones(2, V, device=device), 0.8, top_k,
                            torch.ones((), dtype=torch.bool, device=device))
            assert token.tolist() == [maxima[0], min(set(range(V)) - set(maxima))], (maxima, top_k, token)


def check_finite_flag_many_blocks(device, V=3000):
    """The flag where a row spans many programs (V ids, blocks of 256 or 128) and only row 1 of 3 is bad, late in it:
    the flag is the row's last program's verdict on the row's winner, not one block's; every token in range."""
    inf, nan = float("inf"), float("nan")
    for bad, ok in ((nan, False), (inf, False), (-inf, True), (None, False), ("nans", False)):
        logits = torch.randn(3, V, generator=torch.Generator().manual_seed(0)).to(device)
        if bad is None:
            logits[1] = -inf  # nothing to draw from in row 1
        elif bad == "nans":
            logits[1, ::V // 5] = nan  # as many nans as the top-k, one in each fifth of the row: the k-th is a nan
        else:
            logits[1, V - 100] = bad
        for top_k in (None, 5):
            finite = torch.ones((), dtype=torch.bool, device=device)
            token = fs.draw(logits, torch.ones(3, V, device=device), 1.0, top_k, finite)
            assert finite.item() == ok, (bad, top_k)
            assert ((token >= 0) & (token < V)).all()


def argmax_rows(V: int, dtype, device) -> torch.Tensor:
    """Rows for torch.argmax's rules, V ids (several blocks at the test's BLOCK, the last partial): a coarse grid of
    values (ties at the maximum in several blocks), zeros of both signs first in either order and across blocks, nans
    (the first wins, whatever comes before it: +inf too), +inf twice, all -inf, the maximum in the last id alone."""
    inf, nan = float("inf"), float("nan")
    rows = [tied_logits(1, V, torch.float32, seed=5)[0], torch.randn(V, generator=torch.Generator().manual_seed(6))]
    for zeros in (((10, -0.0), (V // 2, 0.0)), ((10, 0.0), (V // 2, -0.0)), ((V - 5, 0.0), (V // 2, -0.0))):
        row = -torch.rand(V, generator=torch.Generator().manual_seed(7)) - 1  # all < 0 but the zeros
        for i, z in zeros:
            row[i] = z
        rows.append(row)
    row = torch.randn(V, generator=torch.Generator().manual_seed(8))
    row[[3, V // 2, V - 1]] = torch.tensor([inf, nan, nan])
    rows.append(row)
    row = torch.randn(V, generator=torch.Generator().manual_seed(9))
    row[[V // 3, V - 2]] = inf
    rows.append(row)
    rows.append(torch.full((V,), -inf))
    row = torch.zeros(V) - 3
    row[V - 1] = 2.0
    rows.append(row)
    return torch.stack(rows).to(dtype).to(device)


def check_argmax(logits):
    """fused_sample.argmax's token is torch.argmax's, row by row, and through sample_next(temperature 0); its
    finite flag is the torch form's (sample_next's torch ops): cleared exactly where a row's chosen logit is nan or
    +-inf, for each row alone and for all the rows at once."""
    token = fs.argmax(logits)
    assert token.dtype == torch.long and torch.equal(token, logits.argmax(dim=-1)), (token, logits.argmax(dim=-1))
    via = sample_next(logits, 0.0, None, backend="triton")
    assert torch.equal(via, token)
    chosen_finite = logits.float().gather(1, token[:, None]).isfinite()[:, 0].cpu()
    for i in range(logits.size(0)):
        flag, torch_flag = (torch.ones((), dtype=torch.bool, device=logits.device) for _ in range(2))
        fs.argmax(logits[i:i + 1], flag)
        sample_next(logits[i:i + 1], 0.0, None, finite=torch_flag, backend="torch")
        assert flag.item() == torch_flag.item() == bool(chosen_finite[i]), (i, logits[i])
    flag = torch.ones((), dtype=torch.bool, device=logits.device)
    sample_next(logits, 0.0, None, finite=flag, backend="triton")
    assert flag.item() == bool(chosen_finite.all())


def finite_cases():
    inf, nan = float("inf"), float("nan")
    return {(1.0, -inf, 0.0, 2.0): True, (1.0, inf, 0.0, 2.0): False, (-inf,) * 4: False, (nan, 1.0, 0.0, 2.0): False,
            (1.0, 0.0, -inf, -inf): True, (-inf, -inf, -inf, 3.0): True}


def check_finite_flag(device):
    for row, ok in finite_cases().items():
        for top_k in (None, 2, 3):
            logits = torch.tensor([row], device=device)
            q = torch.ones_like(logits)
            flags = []
            for backend in ("triton", "torch"):
                finite = torch.ones((), dtype=torch.bool, device=device)
                token = sample_next(logits, 0.8, top_k, finite=finite, backend=backend)
                assert 0 <= int(token) < 4  # a valid id whatever the row (the next step embeds it)
                flags.append(finite.item())
            assert flags == [ok, ok], (row, top_k, flags)
            finite = torch.ones((), dtype=torch.bool, device=device)
            fs.draw(logits, q, 0.8, top_k, finite)
            assert finite.item() == ok
    finite = torch.zeros((), dtype=torch.bool, device=device)  # and-ed: a cleared flag stays cleared
    fs.draw(torch.tensor([[1.0, 2.0]], device=device), torch.ones(1, 2, device=device), 1.0, None, finite)
    assert not finite.item()


# ----------------------------------------------------------------------------------------
# Dispatch and errors (CPU, no interpreter)


def test_backend_and_argument_errors():
    logits = torch.randn(2, 10)
    with pytest.raises(ValueError, match="backend='fast'.*auto"):
        sample_next(logits, 0.8, 3, backend="fast")
    if fs.unsupported(logits) is not None:  # the plain CPU: a clear error for 'triton', the torch form for 'auto'
        with pytest.raises(ValueError, match="sampling kernel cannot run: device cpu"):
            sample_next(logits, 0.8, 3, backend="triton")
        assert sample_next(logits, 0.8, 3).shape == (2,)
    finite = torch.ones((), dtype=torch.bool)
    with pytest.raises(ValueError, match="q must be float32"):
        fs.draw(logits, torch.ones(2, 9), 0.8, 3, finite)
    with pytest.raises(ValueError, match="temperature=0.0 must be > 0"):
        fs.draw(logits, torch.ones(2, 10), 0.0, 3, finite)
    with pytest.raises(ValueError, match="top_k=0 must be >= 1"):
        fs.draw(logits, torch.ones(2, 10), 0.8, 0, finite)
    with pytest.raises(ValueError, match="no ids"):
        fs.draw(logits[:, :0], torch.ones(2, 0), 0.8, None, finite)
    with pytest.raises(ValueError, match="score_out must be float32"):
        fs.draw(logits, torch.ones(2, 10), 0.8, 3, finite, torch.ones(3))
    for backend in ("torch", "auto"):  # the torch form refuses them too (it would draw nonsense or fail deep inside)
        with pytest.raises(ValueError, match="top_k=0 must be >= 1"):
            sample_next(logits, 0.8, 0, backend=backend)
        for temperature in (-0.5, float("nan")):
            with pytest.raises(ValueError, match="must be >= 0"):
                sample_next(logits, temperature, 3, backend=backend)
    with pytest.raises(ValueError, match="no ids to choose from"):
        fs.argmax(logits[:, :0])
    assert fs.argmax(torch.zeros(0, 10)).shape == (0,)  # no rows: nothing launched
    assert fs.draw(torch.zeros(0, 10), torch.ones(0, 10), 0.8, 3, finite).shape == (0,)
    if fs.unsupported(logits) is not None:
        with pytest.raises(ValueError, match="sampling kernel cannot run"):  # greedy too: 'triton' means the kernels
            sample_next(logits, 0.0, None, backend="triton")
    assert fs.unsupported(torch.zeros(2, 10, dtype=torch.float64)) is not None
    for t in (0.8, 0.7, 1.3):  # float32 1 / float32 t (at 0.7 and 1.3 not the float64 quotient)
        assert fs.inverse_temperature(t) == (torch.ones(()) / torch.tensor(t)).item()


def test_kernel_arguments_checked_before_a_launch(monkeypatch):
    """What the kernels cannot take is refused before anything is launched, with a ValueError naming it: noise q at a
    column stride, a score_out or finite flag of another dtype or size, logits without unit column stride; and the
    limits of the packed ids (ids below 2^24) and of the grid (at most 65,535 programs a row), at their edges."""
    logits, finite = torch.randn(2, 10), torch.ones((), dtype=torch.bool)
    with pytest.raises(ValueError, match="q must be float32"):
        fs.draw(logits, torch.ones(2, 20)[:, ::2], 0.8, 3, finite)
    with pytest.raises(ValueError, match="score_out must be float32"):
        fs.draw(logits, torch.ones(2, 10), 0.8, 3, finite, torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="finite must be a one-element bool tensor"):
        fs.draw(logits, torch.ones(2, 10), 0.8, 3, torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="finite must be a one-element bool tensor"):
        fs.argmax(logits, torch.ones((), dtype=torch.int8))
    with pytest.raises(ValueError, match="packs ids in 24 bits"):
        fs.argmax(torch.zeros(1, 1).expand(1, 1 << 24))
    assert fs._blocks(1, (1 << 24) - 1, "argmax") == (512, -(-((1 << 24) - 1) // 512))
    monkeypatch.setattr(fs, "BLOCK", 256)
    assert fs._blocks(1, 65535 * 256, "draw") == (256, 65535)
    with pytest.raises(ValueError, match="65,536 programs a row"):
        fs._blocks(1, 65535 * 256 + 1, "draw")
    monkeypatch.setattr(fs, "_interpret", lambda: True)  # the CPU counts as a Triton device
    if fs._HAVE_TRITON:
        assert fs.unsupported(logits) is None
        assert "unit stride" in fs.unsupported(torch.randn(2, 20)[:, ::2])


# ----------------------------------------------------------------------------------------
# The kernel through Triton's interpreter (tests/test_interpreted.py runs these in its child process)


@needs_child
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_interp_draw_is_the_argmax_of_the_torch_scores(dtype, monkeypatch):
    """Several blocks a row (64 ids here) and a partial one, ties at the k-th value, k from 1 to V - 1 and none (32-bit
    keys, four radix rounds, for fp32; 16-bit, two rounds, for the others)."""
    monkeypatch.setattr(fs, "BLOCK", 64)
    logits = tied_logits(3, 300, dtype)
    for top_k in (1, 17, 299, None):
        check_draw(logits, 0.8, top_k, exact=False)
    check_draw(logits[:, :250], 3.0, 40, exact=False)  # a view: the row stride is 300


@needs_child
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_interp_kept_set_is_torchs_top_k(dtype, monkeypatch):
    monkeypatch.setattr(fs, "BLOCK", 32)
    logits = tied_logits(1, 80, dtype, seed=3)
    for top_k in (1, 9, 40, 79):
        check_kept_set(logits, top_k, near=4)


@needs_child
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_interp_argmax_is_torchs(dtype, monkeypatch):
    """Blocks of 64 ids, 300 ids a row (the last block partial), and a view of 250 of them (the row stride 300)."""
    monkeypatch.setattr(fs, "BLOCK", 64)
    logits = argmax_rows(300, dtype, "cpu")
    if dtype == torch.bfloat16:  # the interpreter (numpy has no bf16) never finds a bf16 nan unequal to itself: the
        logits = logits[~logits.isnan().any(dim=-1)]  # nan row is the CUDA test's (the draw's nan tests are fp32)
    check_argmax(logits)
    check_argmax(logits[:, :250])
    check_argmax(logits[:1, :1])  # one id: one program with one lane


@needs_child
def test_interp_finite_flag_is_the_torch_forms(monkeypatch):
    check_finite_flag("cpu")
    monkeypatch.setattr(fs, "BLOCK", 128)
    check_finite_flag_many_blocks("cpu", V=1000)


@needs_child
def test_interp_first_id_on_tied_scores(monkeypatch):
    monkeypatch.setattr(fs, "BLOCK", 128)
    check_first_id_on_tied_scores("cpu", V=1000, top_ks=(None, 3))


@needs_child
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_interp_signed_zeros_negative_nans_and_minus_inf_blocks(dtype, monkeypatch):
    """What the other rows miss (blocks of 64, V = 200, the last partial). The draw (noise 1, temperature 1: the scores
    are x - max, exactly torch's): a row whose maximum is +0 with a -0 in an earlier block (scores -0 and +0, equal:
    the first id wins; with top_k 1 the k-th largest is +0 and both are kept), and a row of negatives only (the kernel
    subtracts its max, not a masked lane's 0); an id outside the top-k against a kept id's low score. argmax: a nan
    with its sign bit set (a nan: torch.argmax picks it), and a row whose first block is all -inf (the finite flag is
    the row's winner's, not the first block's)."""
    monkeypatch.setattr(fs, "BLOCK", 64)
    V = 200
    g = torch.Generator().manual_seed(11)
    zeros = torch.full((V,), -1.0)
    zeros[10], zeros[150] = -0.0, 0.0
    logits = torch.stack([zeros, -1.0 - torch.rand(V, generator=g)]).to(dtype)
    q = torch.ones(2, V)
    for top_k in (None, 1):
        finite, best = torch.ones((), dtype=torch.bool), torch.full((2,), float("nan"))
        token = fs.draw(logits, q, 1.0, top_k, finite, best)
        scores = gumbel_scores(logits, q, 1.0, top_k)
        assert finite.item() and token.tolist() == [10, int(scores[1].argmax())], (top_k, token)
        assert torch.equal(best, scores.max(dim=-1).values), (top_k, best)
    # top_k 1 keeps id 0 alone: id 1, outside it, never wins, however low id 0's score (q = 10: -log q = -2.3)
    token = fs.draw(torch.tensor([[2.0, 1.5, 0.0, -1.0]]).to(dtype), torch.tensor([[10.0, 1.0, 1.0, 1.0]]), 1.0, 1,
                    torch.ones((), dtype=torch.bool))
    assert token.tolist() == [0]
    rows = torch.randn(2, V, generator=g)
    rows[0, 100] = -torch.tensor(float("nan"))  # bits 0xffc00000: the sign set
    rows[1, :64] = float("-inf")
    rows = rows.to(dtype)
    assert rows[0, 100].view(torch.int16 if dtype == torch.float16 else torch.int32) < 0
    check_argmax(rows)


@needs_child
def test_interp_sample_next_draws_the_torch_forms_tokens():
    """The same generator seed through either backend: the same noise, so the same tokens, and the same state after."""
    logits = torch.randn(4, 500, generator=torch.Generator().manual_seed(1)) * 3
    tokens, states = [], []
    for backend in ("triton", "torch"):
        g = torch.Generator().manual_seed(5)
        tokens.append(torch.stack([sample_next(logits, 0.7, 30, g, 450, backend=backend) for _ in range(3)]))
        states.append(g.get_state())
    assert torch.equal(tokens[0], tokens[1]) and torch.equal(states[0], states[1])
    assert int(tokens[0].max()) < 450


# ----------------------------------------------------------------------------------------
# On the GPU


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cuda_draw_equals_the_torch_form_at_gpt2s_vocabulary(dtype):
    """GPT-2's padded vocabulary cut to its 50,257 ids (a view), 64 rows: the kernel's score is the torch form's
    maximum bit for bit, for k from 1 to V - 1 and none, at temperatures from 1e-3 to 3."""
    logits = tied_logits(64, 50304, dtype, "cuda")[:, :50257]
    for temperature in (0.8, 1e-3, 3.0):
        for top_k in (1, 50, 200, 50256, None):
            check_draw(logits, temperature, top_k, exact=True)
    check_draw((torch.randn(64, 50257, device="cuda") * 3).to(dtype), 0.8, 200, exact=True)  # no ties


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cuda_argmax_is_torchs(dtype, monkeypatch):
    """At GPT-2's vocabulary cut to its 50,257 ids (a view), default blocks (1 row, 9 rows) and blocks of 256 and 4,096:
    torch.argmax's token on every row (CUDA's argmax: the first id of the maximum, the first nan)."""
    logits = argmax_rows(50304, dtype, "cuda")[:, :50257]
    for block in (None, 256, 4096):
        monkeypatch.setattr(fs, "BLOCK", block)
        check_argmax(logits)
        check_argmax(logits[3:4])
    big = (torch.randn(64, 50257, device="cuda") * 3).to(dtype)
    check_argmax(big)


@needs_cuda
@pytest.mark.parametrize("block", [1024, 256, 4096])
def test_cuda_kept_set_is_torchs_top_k(block, monkeypatch):
    monkeypatch.setattr(fs, "BLOCK", block)
    for dtype in (torch.bfloat16, torch.float32):
        logits = tied_logits(1, 3000, dtype, "cuda", seed=4)
        for top_k in (1, 200, 2999):
            check_kept_set(logits, top_k)


@needs_cuda
def test_cuda_finite_flag_is_the_torch_forms(monkeypatch):
    check_finite_flag("cuda")
    monkeypatch.setattr(fs, "BLOCK", 256)
    check_finite_flag_many_blocks("cuda")


@needs_cuda
def test_cuda_first_id_on_tied_scores(monkeypatch):
    monkeypatch.setattr(fs, "BLOCK", 256)
    check_first_id_on_tied_scores("cuda")


@needs_cuda
def test_cuda_sample_next_draws_the_torch_forms_tokens():
    """sample_next through the kernels and through the torch ops from one seeded CUDA generator, at GPT-2's vocabulary
    cut by vocab_limit: the same tokens, and the generator left in the same state."""
    logits = (torch.randn(8, 50304, generator=torch.Generator().manual_seed(2)) * 3).to(torch.bfloat16).cuda()
    tokens, states = [], []
    for backend in ("triton", "torch"):
        g = torch.Generator(device="cuda").manual_seed(5)
        tokens.append(torch.stack([sample_next(logits, 0.8, 200, g, 50257, backend=backend) for _ in range(20)]))
        states.append(g.get_state())
    assert torch.equal(tokens[0], tokens[1]) and torch.equal(states[0], states[1])
    assert int(tokens[0].max()) < 50257


@needs_cuda
@pytest.mark.parametrize("temperature,top_k", [(0.8, 3), (1.0, None), (2.0, 10)])
def test_cuda_draws_follow_the_top_k_softmax(temperature, top_k):
    """200,000 draws (rows of one call) through sample_next's default dispatch, which on CUDA is the kernel: each
    frequency within 5 standard errors of softmax(logits / temperature) over the top_k, nothing outside it."""
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, 3.0, 0.7, 5.0])
    n = 200_000
    calls = []
    draw = fs.draw
    try:
        fs.draw = lambda *a: calls.append(1) or draw(*a)
        token = sample_next(logits.expand(n, -1).to(torch.bfloat16).cuda(), temperature, top_k,
                            torch.Generator(device="cuda").manual_seed(1))
    finally:
        fs.draw = draw
    assert calls == [1]
    kept = logits.to(torch.bfloat16).float()
    allowed = torch.ones_like(kept, dtype=torch.bool)
    if top_k is not None and top_k < kept.numel():
        allowed = kept >= torch.topk(kept, top_k).values[-1]
    ref = F.softmax(torch.where(allowed, kept / temperature, float("-inf")), dim=-1).double()
    freq = torch.bincount(token.cpu(), minlength=logits.numel()).double() / n
    assert (freq[~allowed] == 0).all()
    assert ((freq - ref).abs() <= 5 * (ref * (1 - ref) / n).sqrt() + 1e-12).all()

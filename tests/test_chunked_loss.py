"""GPTConfig.loss_head / loss_chunk_tokens: the loss head (lm_head + cross-entropy) with its gradients
computed in the forward (the fused head, the default), at once or in chunks. The same loss and gradients
as F.cross_entropy over all logits (float64: to rounding; a model in float32 and train.py's loss curve:
to 1e-5), and no (tokens x vocab) tensor kept for the backward."""
import pytest
import torch
import torch.nn.functional as F

from model import GPT, GPTConfig, cross_entropy, linear_cross_entropy
from test_train import SMALL, train_losses


def problem(M=37, d=8, V=50, dtype=torch.float64, ignored=(3, 20)):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(M, d, dtype=dtype, generator=g, requires_grad=True)
    w = torch.randn(V, d, dtype=dtype, generator=g, requires_grad=True)
    t = torch.randint(0, V, (M,), generator=g)
    t[list(ignored)] = -1
    return h, w, t


@pytest.mark.parametrize("chunk", [1, 5, 16, 37, 100])
def test_equals_cross_entropy_in_float64(chunk):
    h, w, t = problem()
    ref = F.cross_entropy(h @ w.t(), t, ignore_index=-1)
    gh, gw = torch.autograd.grad(3.0 * ref, (h, w))
    loss = linear_cross_entropy(h, w, t, chunk)
    ch, cw = torch.autograd.grad(3.0 * loss, (h, w))  # the incoming gradient scales both
    torch.testing.assert_close(loss, ref, rtol=1e-13, atol=0)
    torch.testing.assert_close(ch, gh, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(cw, gw, rtol=1e-12, atol=1e-15)
    assert ch[3].abs().max() == 0 and ch[20].abs().max() == 0  # ignored rows get no gradient


def test_without_grad_and_only_some_inputs():
    h, w, t = problem()
    ref = F.cross_entropy(h @ w.t(), t, ignore_index=-1)
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(h, w, t, 7), ref.detach(), rtol=1e-13, atol=0)
    w_frozen = w.detach()
    (gh,) = torch.autograd.grad(linear_cross_entropy(h, w_frozen, t, 7), (h,))
    torch.testing.assert_close(gh, torch.autograd.grad(F.cross_entropy(h @ w_frozen.t(), t, ignore_index=-1), (h,))[0])


def test_all_rows_ignored_is_nan_like_cross_entropy():
    h, w, t = problem()
    t[:] = -1
    assert torch.isnan(linear_cross_entropy(h, w, t, 7)) and torch.isnan(F.cross_entropy(h @ w.t(), t, ignore_index=-1))


def saved_numels(fn) -> list:
    """numel of every tensor autograd saves for the backward while fn() runs."""
    sizes = []

    def pack(x):
        sizes.append(x.numel())
        return x
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        fn()
    return sizes


HEADS = {"logits": dict(loss_head="logits"), "fused": dict(), "chunked": dict(loss_chunk_tokens=10)}


@pytest.mark.parametrize("tie", [True, False])
def test_model_same_loss_and_gradients_and_no_full_logits(tie):
    """nanoGPT's head (loss_head='logits'), the fused head (the default) and the fused head in chunks: the same
    loss and gradients; only the first returns logits and keeps (B*T, V) values for the backward."""
    kw = dict(n_layer=2, n_head=2, n_embd=16, block_size=16, vocab_size=96, bias=False, tie_embeddings=tie)
    torch.manual_seed(0)
    models = {name: GPT(GPTConfig(**kw, **extra)) for name, extra in HEADS.items()}
    for m in models.values():
        m.load_state_dict(models["logits"].state_dict())
    x = torch.randint(0, 96, (3, 16))
    y = torch.randint(0, 96, (3, 16))
    y[0, :5] = -1
    out = {}
    for name, m in models.items():
        res = {}
        res["sizes"] = saved_numels(lambda: res.setdefault("fwd", m(x, y)))
        logits, loss = res["fwd"]
        loss.backward()
        res["loss"], res["logits"] = loss.detach(), logits
        res["grads"] = {n: p.grad.clone() for n, p in m.named_parameters()}
        out[name] = res
    assert out["logits"]["logits"].shape == (3, 16, 96)
    assert out["fused"]["logits"] is None and out["chunked"]["logits"] is None
    full_logits = 3 * 16 * 96
    assert max(out["logits"]["sizes"]) >= full_logits  # nanoGPT's head keeps (B*T, V) for its backward
    for name in ("fused", "chunked"):
        torch.testing.assert_close(out[name]["loss"], out["logits"]["loss"], rtol=1e-6, atol=0)
        for n, g in out["logits"]["grads"].items():
            torch.testing.assert_close(out[name]["grads"][n], g, rtol=1e-5, atol=1e-7, msg=f"{name} {n}")
        assert max(out[name]["sizes"]) < full_logits  # grad_h (B*T, d) and grad_w (V, d) only


def test_fused_head_returns_logits_when_evaluating():
    """Without gradients the fused head returns the logits with the loss (evaluation, e.g. evaluate.py), the
    same as nanoGPT's head; in chunks it returns none."""
    kw = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=96, bias=False)
    torch.manual_seed(0)
    models = {name: GPT(GPTConfig(**kw, **extra)) for name, extra in HEADS.items()}
    for m in models.values():
        m.load_state_dict(models["logits"].state_dict())
    x, y = torch.randint(0, 96, (2, 16)), torch.randint(0, 96, (2, 16))
    with torch.no_grad():
        res = {name: m(x, y) for name, m in models.items()}
    torch.testing.assert_close(res["fused"][0], res["logits"][0], rtol=0, atol=0)
    assert res["chunked"][0] is None
    for name in ("fused", "chunked"):
        torch.testing.assert_close(res[name][1], res["logits"][1], rtol=1e-6, atol=0)


def test_loss_head_is_validated():
    with pytest.raises(ValueError, match="loss_head='bogus' is unknown"):
        GPTConfig(loss_head="bogus")
    for chunk in (1, 8):  # any chunking at all: the plain head has none
        with pytest.raises(ValueError, match=f"loss_chunk_tokens={chunk} needs loss_head='fused'"):
            GPTConfig(loss_head="logits", loss_chunk_tokens=chunk)


@pytest.mark.parametrize("value", [-1, 2.5, "8"])
def test_loss_chunk_tokens_is_validated(value):
    with pytest.raises(ValueError, match="loss_chunk_tokens"):
        GPTConfig(loss_chunk_tokens=value)


def test_train_loss_curve_matches_the_plain_head(small_data, tmp_path):
    """train.py with the fused head (the default) and with it in chunks follows nanoGPT's head's loss curve
    (float32, 12 iterations; the model keys reach the model through the command line like any other)."""
    import train
    args = [*SMALL, f"--data_dir={small_data}", "--max_iters=12", "--eval_interval=6", "--dtype=float32",
            "--save_checkpoint=False"]
    train.main([*args, f"--out_dir={tmp_path / 'plain'}", "--loss_head=logits"])
    train.main([*args, f"--out_dir={tmp_path / 'fused'}"])
    train.main([*args, f"--out_dir={tmp_path / 'chunked'}", "--loss_chunk_tokens=5"])
    a = train_losses(tmp_path / "plain")
    assert sorted(a) == list(range(1, 13))
    for name in ("fused", "chunked"):
        b = train_losses(tmp_path / name)
        assert sorted(b) == sorted(a)
        for i in a:
            assert b[i] == pytest.approx(a[i], rel=1e-5), (name, i, a[i], b[i])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_autocast_as_accurate_as_the_plain_head(dtype):
    """Under float16/bfloat16 autocast the chunked head's gradients are as close to float64 as the plain
    head's: the 1/n of the mean is applied after the low-precision matmuls (before them, (p - onehot)/n
    over thousands of tokens underflows in float16)."""
    g = torch.Generator().manual_seed(0)
    M, d, V = 2048, 32, 3000
    h64, w64 = torch.randn(M, d, dtype=torch.float64, generator=g), 0.1 * torch.randn(V, d, dtype=torch.float64, generator=g)
    t = torch.randint(0, V, (M,), generator=g)

    def grads(fn, autocast_dtype=None):
        h = (h64 if autocast_dtype is None else h64.float()).clone().requires_grad_()
        w = (w64 if autocast_dtype is None else w64.float()).clone().requires_grad_()
        with torch.autocast("cpu", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            loss = fn(h, w)
        (1024.0 * loss).backward()  # a loss scale, as float16's GradScaler applies
        return h.grad.double() / 1024, w.grad.double() / 1024

    ref = grads(lambda h, w: F.cross_entropy(h @ w.t(), t))
    plain = grads(lambda h, w: F.cross_entropy((h @ w.t()).float(), t), dtype)
    chunked = grads(lambda h, w: linear_cross_entropy(h, w, t, 512), dtype)
    for r, p, c in zip(ref, plain, chunked):
        err_plain, err_chunked = ((p - r).norm() / r.norm()).item(), ((c - r).norm() / r.norm()).item()
        assert err_chunked <= 1.5 * err_plain + 1e-6, (err_plain, err_chunked)


def test_float16_weight_gradient_of_a_frequent_token_stays_finite():
    """Under float16 autocast grad_weight's row of a token that is every row's target sums (p - 1) h over the chunk:
    4096 rows of |h| = 20 give 8e4, past float16's 65504. The head scales h down for that matmul and back in the
    backward, so the gradient is finite and float16-accurate (scaled the other way, or not at all, it is inf)."""
    M, d, V = 4096, 16, 64
    g = torch.Generator().manual_seed(0)
    h = (20 * torch.ones(M, d) + torch.randn(M, d, generator=g)).requires_grad_()
    w = (0.001 * torch.randn(V, d, generator=g)).requires_grad_()
    t = torch.zeros(M, dtype=torch.long)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = linear_cross_entropy(h, w, t, M)
    (gw,) = torch.autograd.grad(loss, w)
    h64, w64 = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (ref,) = torch.autograd.grad(F.cross_entropy(h64 @ w64.t(), t), w64)
    assert torch.isfinite(gw).all() and ((gw.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_evaluation_computes_no_gradients():
    """Under no_grad (evaluation) the chunked head does the forward matmul only: 1/3 of the FLOPs of a
    training call (forward, grad_h, grad_weight), though its inputs require grad."""
    from torch.utils.flop_counter import FlopCounterMode
    h, w, t = problem(M=64, d=16, V=40, dtype=torch.float32)
    flops = {}
    for mode in ("train", "eval"):
        with FlopCounterMode(display=False) as fc, torch.set_grad_enabled(mode == "train"):
            linear_cross_entropy(h, w, t, 16)
        flops[mode] = fc.get_total_flops()
    assert flops["eval"] == 2 * 64 * 16 * 40 and flops["train"] == 3 * flops["eval"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_logits_cross_entropy_is_f_cross_entropy(dtype):
    """model.cross_entropy (the loss of nanoGPT's head and of evaluation forwards: the backward from the logits and a log-sum-exp
    per row, no float32 log-probabilities kept) gives F.cross_entropy(logits.float())'s loss and gradient,
    ignored rows (-1) included; float64 to rounding, lower precisions to their own rounding of the same math."""
    g = torch.Generator().manual_seed(5)
    logits = (torch.randn(37, 101, generator=g, dtype=torch.float64) * 4).to(dtype).requires_grad_()
    targets = torch.randint(0, 101, (37,), generator=g)
    targets[[3, 10, 11]] = -1
    loss = cross_entropy(logits, targets)
    (grad,) = torch.autograd.grad(loss * 3.0, logits)  # an upstream gradient other than 1
    ref_logits = logits.detach().clone().requires_grad_()
    ref = F.cross_entropy(ref_logits.float() if dtype != torch.float64 else ref_logits, targets, ignore_index=-1)
    (ref_grad,) = torch.autograd.grad(ref * 3.0, ref_logits)
    assert loss.dtype == ref.dtype and grad.dtype == dtype
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    assert abs(loss.item() - ref.item()) < tol * max(1.0, abs(ref.item()))
    assert (grad.double() - ref_grad.double()).abs().max().item() < tol * ref_grad.double().abs().max().item()
    assert grad[[3, 10, 11]].abs().max().item() == 0  # ignored rows: no gradient
    all_ignored = cross_entropy(logits.detach(), torch.full((37,), -1))
    assert torch.isnan(all_ignored) and torch.isnan(F.cross_entropy(logits.detach().float(), torch.full((37,), -1),
                                                                     ignore_index=-1))

"""fused_loss.cross_entropy_rows: each row's cross-entropy and softmax - onehot in one pass over the logits.

Properties: the kernel computes F.cross_entropy's per-row loss (reduction='none') and the gradient of its sum,
against float64, with ignored rows (-1: loss and gradient 0), targets in the first and last column, widths that
are not multiples of the block (several blocks per row), and a NaN loss for a target outside [-1, V); without
want_grad it writes no gradient. The torch backend is the same formula. On CUDA (skipped without a GPU): bf16 at
GPT-2's shape, and a compiled GPT-2-like model whose fused head (the kernel inside torch.compile) gives nanoGPT's
head's loss and gradients. CPU: the kernel through Triton's interpreter (tests/interpreted.py; fp32 and fp16).
"""
import pytest
import torch
import torch.nn.functional as F

import fused_loss as fl
from interpreted import needs_child

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


def make(M, V, dtype, device="cpu", seed=0, scale=4.0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(M, V, generator=g) * scale + 1.0).to(device=device, dtype=dtype)
    targets = torch.randint(0, V, (M,), generator=g)
    targets[0], targets[-1] = 0, V - 1  # the first and the last column
    if M > 3:
        targets[2] = -1  # ignored
    return logits, targets.to(device)


def reference(logits, targets):
    """F.cross_entropy per row in float64 and the gradient of the rows' sum (softmax - onehot)."""
    x = logits.double().detach().requires_grad_()
    rows = F.cross_entropy(x, targets, ignore_index=-1, reduction="none")
    (grad,) = torch.autograd.grad(rows.sum(), x)
    return rows.detach(), grad


def check(loss, grad, logits, targets, tol, loss_tol=None):
    """loss_tol (default tol): the loss's, relative to the largest row loss; tol: the gradient's, absolute."""
    ref_loss, ref_grad = reference(logits, targets)
    assert loss.dtype == torch.float32 and loss.shape == targets.shape
    loss_tol = tol if loss_tol is None else loss_tol
    assert (loss.double() - ref_loss).abs().max().item() <= loss_tol * max(1.0, ref_loss.abs().max().item())
    assert grad.dtype == logits.dtype and grad.shape == logits.shape
    assert (grad.double() - ref_grad).abs().max().item() <= tol
    ignored = targets == -1
    if ignored.any():
        assert loss[ignored].abs().max().item() == 0 and grad[ignored].abs().max().item() == 0


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 4e-3), (torch.float16, 5e-4)])
def test_torch_backend_matches_float64(dtype, tol):
    """The torch ops' loss in float32 (to float32's error whatever the logits' dtype) and the gradient in the
    logits' dtype (to that dtype's rounding)."""
    logits, targets = make(9, 301, dtype)
    check(*fl.cross_entropy_rows(logits, targets, True, backend="torch"), logits, targets, tol, loss_tol=1e-5)
    loss, grad = fl.cross_entropy_rows(logits, targets, False, backend="torch")
    assert grad is None and torch.equal(loss, fl.cross_entropy_rows(logits, targets, True, backend="torch")[0])


def test_targets_outside_the_vocabulary_give_nan():
    logits, _ = make(4, 50, torch.float32)
    loss, grad = fl.cross_entropy_rows(logits, torch.tensor([3, -2, 50, -1]), True, backend="torch")
    assert torch.isfinite(loss[0]) and torch.isnan(loss[1]) and torch.isnan(loss[2]) and loss[3] == 0
    assert grad[1:].abs().max() == 0


def test_dispatch_and_errors():
    logits, targets = make(4, 30, torch.float32)
    with pytest.raises(ValueError, match="backend='bogus'"):
        fl.cross_entropy_rows(logits, targets, True, backend="bogus")
    if not fl._interpret():  # the CPU without the interpreter: auto takes torch, a forced kernel is an error
        with pytest.raises(ValueError, match="cannot run: device cpu"):
            fl.cross_entropy_rows(logits, targets, True, backend="triton")
        auto = fl.cross_entropy_rows(logits, targets, True)
        torch_ = fl.cross_entropy_rows(logits, targets, True, backend="torch")
        assert torch.equal(auto[0], torch_[0]) and torch.equal(auto[1], torch_[1])

def test_unsupported_names_why(monkeypatch):
    """What the kernel cannot take (auto then takes the torch ops), past the device check."""
    monkeypatch.setattr(fl, "_interpret", lambda: True)  # the CPU counts as a Triton device, as in the child
    logits, targets = make(4, 30, torch.float32)
    if fl._triton_available():
        assert fl.unsupported(logits, targets) is None
        assert "dtype torch.float64" in fl.unsupported(logits.double(), targets)
        assert "shapes" in fl.unsupported(logits, targets[:3])
        assert "shapes" in fl.unsupported(logits[None], targets)
        assert "contiguous" in fl.unsupported(logits.t().contiguous().t(), targets)
        assert "contiguous" in fl.unsupported(logits, targets.repeat_interleave(2)[::2])  # targets at stride 2
        assert "contiguous" in fl.unsupported(logits, targets.to("meta"))  # targets on another device
    monkeypatch.setattr(fl, "_interpret", lambda: False)
    assert "device cpu" in fl.unsupported(logits, targets)


def test_torch_rows_with_minus_inf_logits():
    x = torch.randn(3, 50)
    x[0, :20] = float("-inf")
    x[1, :] = float("-inf")
    loss, grad = fl.cross_entropy_rows(x, torch.tensor([30, -1, 2]), True, backend="torch")
    assert torch.isfinite(loss).all() and torch.isfinite(grad).all() and loss[1] == 0 and grad[1].abs().max() == 0


def call_targets(graph):
    """Every call_function target in an exported graph and in its submodules' graphs (an autograd.Function's
    forward and backward are traced into submodules)."""
    out = set()
    for _, mod in graph.named_modules():
        g = getattr(mod, "graph", None)
        if isinstance(g, torch.fx.Graph):
            out.update(n.target for n in g.nodes if n.op == "call_function")
    return out


def test_the_model_registers_its_kernel_ops_before_a_trace():
    """In a fresh process without CUDA, where import registers nothing, GPT.__init__ registers the ops of the loss,
    GELU and MLA RoPE kernels once the CPU counts as a Triton device, so that a trace of the model finds them (none
    registered: the kernel path would call nothing); each op is then one of the traced graph's calls. A subprocess:
    in this one an earlier test may have registered the ops already. Fails with any of the three constructor calls
    to register_ops removed."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    if not fl._HAVE_TRITON:
        pytest.skip("triton is not installed")
    code = ("import torch, fused_loss, fused_gelu, fused_mla_rope\n"
            "mods = (fused_loss, fused_gelu, fused_mla_rope)\n"
            "assert fused_loss._OP is fused_gelu._FWD is fused_mla_rope._FWD is None  # nothing at import on a CPU\n"
            "for m in mods:\n"
            "    m._interpret = lambda: True  # the CPU counts as a Triton device from now on\n"
            "from model import GPT, GPTConfig\n"
            "model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=200, bias=False,\n"
            "                      attn='mla', kv_rank=8, q_rank=8, pos_emb='rope', mla_rope='decoupled'))\n"
            "assert None not in (fused_loss._OP, fused_gelu._FWD, fused_mla_rope._FWD)\n"
            "x = torch.randint(0, 200, (2, 16))\n"
            "graph, _ = torch._dynamo.export(model)(x, x)\n"
            "calls = {str(n.target) for _, m in graph.named_modules() if isinstance(getattr(m, 'graph', None),\n"
            "         torch.fx.Graph) for n in m.graph.nodes if n.op == 'call_function'}  # as call_targets\n"
            "names = (fused_loss.OP_NAME, fused_gelu.FWD_OP, 'tucker_attention::mla_rope_')  # MLA's: any of its ops\n"
            "print(*[any(c.startswith(name.replace('::', '.')) for c in calls) for name in names])")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                         text=True, timeout=180, env=env)
    assert out.returncode == 0 and out.stdout.split() == ["True"] * 3, (out.stdout, out.stderr[-3000:])


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "torch_path"])
def test_compiled_model_keeps_the_kernel_in_its_graph(monkeypatch, kernel):
    """The fused head's kernel op is registered at import or as the model is built, so torch.compile traces the whole
    training forward, loss head included, as ONE graph (registering it inside the trace broke the graph around the
    head): torch._dynamo.export, which fails on any graph break, succeeds with the kernel path chosen, and the op
    fl.OP_NAME is one of the graph's calls. Control: with the kernel path off (the torch ops) the op is absent, so
    the check tells the two paths apart."""
    from model import GPT, GPTConfig
    if not fl._HAVE_TRITON:
        pytest.skip("triton is not installed")
    monkeypatch.setattr(fl, "_interpret", lambda: True)
    assert fl.register_ops()  # registered in both cases (a CPU-only process registers none at import)
    # kernel: the CPU counts as a Triton device, so the op is traced; torch_path: the head takes the torch ops
    monkeypatch.setattr(fl, "_interpret", lambda: kernel)
    ns, name = fl.OP_NAME.split("::")
    op = getattr(getattr(torch.ops, ns), name).default
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=200, bias=False))
    x = torch.randint(0, 200, (2, 16))
    try:
        graph, _ = torch._dynamo.export(model)(x, x)  # traced with fake tensors: no kernel runs
    finally:
        torch._dynamo.reset()
    assert (op in call_targets(graph)) == kernel


def test_fp16_grad_weight_does_not_overflow():
    """Under float16 autocast, a frequent target token and a large feature of h sum, over a chunk's rows, to more
    than float16's 65504 in grad_weight before the 1/n: the fused head scales h for that matmul (and the backward
    undoes it), so its gradient stays finite and equals nanoGPT's head's (which applies 1/n first)."""
    g = torch.Generator().manual_seed(0)
    M, d, V = 16384, 32, 256
    h = torch.randn(M, d, generator=g)
    h[:, 0] = 30.0
    w = torch.randn(V, d, generator=g) * 0.02
    t = torch.where(torch.rand(M, generator=g) < 0.2, 0, torch.randint(0, V, (M,), generator=g))
    from model import linear_cross_entropy
    grads = {}
    for name in ("fused", "logits"):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = (linear_cross_entropy(hh, ww, t) if name == "fused"
                    else F.cross_entropy(hh @ ww.t(), t, ignore_index=-1))
        (loss * 1024).backward()  # a loss scale, as GradScaler applies
        grads[name] = (hh.grad, ww.grad)
    assert torch.isfinite(grads["fused"][1]).all() and torch.isfinite(grads["fused"][0]).all()
    for a, b in zip(grads["fused"], grads["logits"]):
        assert ((a - b).norm() / b.norm()).item() < 2e-2


# ----------------------------------------------------------------------------------------
# The kernel through Triton's interpreter (tests/test_interpreted.py runs these in its child process)


CASES = [(5, 300), (3, 64), (6, 1000), (1, 7)]  # (M, V): 5, 1, 16 and 1 blocks of BLOCK = 64


@needs_child
@pytest.mark.parametrize("M,V,dtype,tol", [(M, V, torch.float32, 1e-5) for M, V in CASES]
                         + [(M, V, torch.float16, 2e-3) for M, V in CASES[::3]])
def test_interp_kernel_matches_float64(M, V, dtype, tol, monkeypatch):
    monkeypatch.setattr(fl, "BLOCK", 64)
    logits, targets = make(M, V, dtype)
    # the loss is float32 sums of the logits' exact values in either dtype (measured: <= 1e-7 of the largest row
    # loss): 1e-6, not the gradient's fp16 rounding, so a kernel that rounds its scaled logits to fp16 fails
    check(*fl.cross_entropy_rows(logits, targets, True, backend="triton"), logits, targets, tol, loss_tol=1e-6)
    loss, grad = fl.cross_entropy_rows(logits, targets, False, backend="triton")
    assert grad is None
    assert torch.equal(loss, fl.cross_entropy_rows(logits, targets, True, backend="triton")[0])


@needs_child
def test_interp_kernel_nan_for_targets_outside_the_vocabulary(monkeypatch):
    monkeypatch.setattr(fl, "BLOCK", 64)
    logits, _ = make(4, 100, torch.float32)
    targets = torch.tensor([3, -2, 100, -1])
    loss, grad = fl.cross_entropy_rows(logits, targets, True, backend="triton")
    ref, ref_grad = fl.cross_entropy_rows(logits, targets, True, backend="torch")
    assert torch.isnan(loss[1]) and torch.isnan(loss[2]) and loss[3] == 0 and grad[1:].abs().max() == 0
    torch.testing.assert_close(loss[0], ref[0])
    torch.testing.assert_close(grad, ref_grad)


@needs_child
def test_interp_kernel_rows_with_minus_inf_blocks(monkeypatch):
    """-inf logits (a masked vocabulary) in a row's first block, its last, or everywhere in an ignored row: the
    kernel's running max starts at -inf without producing NaN, as the torch rows do."""
    monkeypatch.setattr(fl, "BLOCK", 64)
    x = torch.randn(4, 200)
    x[0, :64] = float("-inf")  # the whole first block
    x[1, :] = float("-inf")  # every logit, an ignored row
    x[2, 150:] = float("-inf")  # the last blocks
    t = torch.tensor([100, -1, 3, 5])
    loss, grad = fl.cross_entropy_rows(x, t, True, backend="triton")
    ref, ref_grad = fl.cross_entropy_rows(x, t, True, backend="torch")
    assert torch.isfinite(loss).all() and torch.isfinite(grad).all() and loss[1] == 0 and grad[1].abs().max() == 0
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(grad, ref_grad)
    check(loss[[0, 2, 3]], grad[[0, 2, 3]], x[[0, 2, 3]], t[[0, 2, 3]], 1e-5)


@needs_child
@pytest.mark.parametrize("l2_hints", [True, False])
def test_interp_kernel_strided_rows_either_load_path(l2_hints, monkeypatch):
    """Logits a view of wider rows (row stride 260, V = 200: its gradient, a new tensor, has stride 200), a row whose
    largest logits are in a later block, a row of logits near -110 (exp(x) below float32's range: the running max is
    the row's, not a start at 0), with the L2 hints' loads and stores or the plain ones (L2_HINTS off)."""
    monkeypatch.setattr(fl, "BLOCK", 64)
    monkeypatch.setattr(fl, "L2_HINTS", l2_hints)
    wide, _ = make(4, 260, torch.float32, seed=4)
    wide[:, 150:] += 6.0  # the running max rises in the row's last blocks
    wide[3] = -110.0 + 0.5 * torch.randn(260, generator=torch.Generator().manual_seed(5))
    logits, targets = wide[:, :200], torch.tensor([199, 5, 120, 7])
    assert logits.stride(0) == 260
    loss, grad = fl.cross_entropy_rows(logits, targets, True, backend="triton")
    assert grad.stride(0) == 200
    check(loss, grad, logits, targets, 1e-5, loss_tol=1e-6)


@needs_child
def test_interp_model_head_matches_nanogpt_head():
    """A small model trained one step with the fused head (the kernel under the interpreter) gives nanoGPT's
    head's loss and gradients (float32)."""
    from model import GPT, GPTConfig
    kw = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=200, bias=False)
    torch.manual_seed(0)
    fused, plain = GPT(GPTConfig(**kw)), GPT(GPTConfig(**kw, loss_head="logits"))
    plain.load_state_dict(fused.state_dict())
    x, y = torch.randint(0, 200, (2, 16)), torch.randint(0, 200, (2, 16))
    y[1, :4] = -1
    losses = {}
    for name, m in (("fused", fused), ("plain", plain)):
        _, loss = m(x, y)
        loss.backward()
        losses[name] = loss.item()
    assert losses["fused"] == pytest.approx(losses["plain"], rel=1e-6)
    for (n, p), q in zip(fused.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=n)


# ----------------------------------------------------------------------------------------
# CUDA


@needs_cuda
@pytest.mark.parametrize("M,V", [(4096, 50304), (300, 128256), (64, 1000)])
def test_cuda_kernel_matches_float64(M, V):
    logits, targets = make(M, V, torch.bfloat16, device="cuda")
    loss, grad = fl.cross_entropy_rows(logits, targets, True)
    # the loss from bf16 logits exactly (fp32 sums); the gradient rounded to bf16 (half an ulp of 1: 4e-3)
    check(loss, grad, logits, targets, 4e-3)
    torch_loss, torch_grad = fl.cross_entropy_rows(logits, targets, True, backend="torch")
    assert (loss - torch_loss).abs().max().item() <= 1e-4 * torch_loss.abs().max().item()
    assert (grad.float() - torch_grad.float()).abs().max().item() <= 8e-3


@needs_cuda
def test_cuda_compiled_fused_head_matches_nanogpt_head():
    """GPT-2-like model (real vocabulary), compiled, bf16 autocast: the fused head (the kernel inside the compiled
    step) gives nanoGPT's head's loss and gradients to bf16 rounding, and returns no logits."""
    from model import GPT, GPTConfig
    kw = dict(n_layer=2, n_head=4, n_embd=128, block_size=256, vocab_size=50304, bias=False)
    torch.manual_seed(0)
    with torch.device("cuda"):
        fused, plain = GPT(GPTConfig(**kw)), GPT(GPTConfig(**kw, loss_head="logits"))
    plain.load_state_dict(fused.state_dict())
    x = torch.randint(0, 50304, (4, 256), device="cuda")
    y = torch.randint(0, 50304, (4, 256), device="cuda")
    y[0, :7] = -1
    out = {}
    for name, m in (("fused", fused), ("plain", plain)):
        step = torch.compile(m)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits, loss = step(x, y)
        loss.backward()
        out[name] = (logits, loss.item(), {n: p.grad.float() for n, p in m.named_parameters()})
    assert out["fused"][0] is None and out["plain"][0].shape == (4, 256, 50304)
    assert out["fused"][1] == pytest.approx(out["plain"][1], rel=1e-3)
    for n, g in out["plain"][2].items():
        err = (out["fused"][2][n] - g).norm() / g.norm()
        assert err.item() < 2e-2, (n, err.item())

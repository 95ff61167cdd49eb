"""Helpers shared by the model tests: a tiny GPT with attention weights scaled up (so attention is far
from uniform and every term of an equivalence matters numerically), token batches, relative error; spies on
what generate draws from and is called with; and the command lines' error contract (one line `error: ...` on stderr, exit 2)."""
import pytest
import torch

from model import GPT, GPTConfig

TINY = dict(n_layer=2, n_head=4, n_embd=32, block_size=24, vocab_size=61, bias=False)


def make(overrides=None, dtype=torch.float64, seed=0, **extra):
    """A tiny GPT (TINY + overrides + extra), attention weights x3, in eval mode."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**{**TINY, **(overrides or {"attn": "mha"}), **extra})).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".attn." in name:
                p.mul_(3.0)
    return model.eval()


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


def tokens(B=2, T=TINY["block_size"], seed=1):
    return torch.randint(0, TINY["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed))


def compiled_step_kernels(model, x, y, kernel_names):
    """One compiled bf16-autocast training step of a CUDA model (compiled by a first step, then profiled): (its loss,
    every parameter's gradient, which of kernel_names the profiler saw run). The GPU tests of a fused training
    kernel compare these between the kernel's path and the torch ops'."""
    torch._dynamo.reset()
    step = torch.compile(model)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        step(x, y)  # compiled before the profiled call
    model.zero_grad(set_to_none=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = step(x, y)
        loss.backward()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events()}
    ran = {k for k in kernel_names if any(k in n for n in names)}
    return loss.item(), [p.grad.clone() for p in model.parameters()], ran


def traced_autograd_functions(model, x) -> int:
    """How many autograd functions torch._dynamo.export finds in model(x, x)'s training forward, traced with fake
    tensors (no kernel runs); export fails on any graph break, so a fused op that breaks the graph fails here."""
    try:
        graph, _ = torch._dynamo.export(model)(x, x)
    finally:
        torch._dynamo.reset()
    return sum("AutogradFunctionApply" in type(n.target).__name__ for n in graph.graph.nodes)


def traced_functions_by_backend(monkeypatch, kernels, build, x) -> dict:
    """{backend: traced_autograd_functions(build(backend), x)} for 'auto' and 'torch', with the wrappers of the
    module `kernels` (and the loss head's, fused_loss) taking their kernel path on the CPU; skips without triton."""
    import pytest
    if not kernels._HAVE_TRITON:
        pytest.skip("triton is not installed")
    import fused_loss
    monkeypatch.setattr(kernels, "_interpret", lambda: True)
    monkeypatch.setattr(fused_loss, "_interpret", lambda: True)
    return {backend: traced_autograd_functions(build(backend), x) for backend in ("auto", "torch")}


def one_line_error(call, capsys, code: int = 2) -> str:
    """call() must exit `code` with one line `error: ...` on stderr (a command line's bad input); returns that line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        call()
    err = capsys.readouterr().err.strip()
    assert e.value.code == code, err
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    return err


def record_drawn_logits(monkeypatch) -> list:
    """A list that fills with the logits of every token model.generate draws (model.sample_next, spied on): these
    tiny models' greedy tokens repeat one id, so equal tokens alone prove little; their logits show a wrong step."""
    import model as model_module
    seen, sample_next = [], model_module.sample_next
    monkeypatch.setattr(model_module, "sample_next",
                        lambda logits, *a, **kw: seen.append(logits.clone()) or sample_next(logits, *a, **kw))
    return seen


def record_step_logits(monkeypatch) -> list:
    """A list that fills with the logits of every StaticDecoder.prefill and .step (copied: a graph's are one static
    buffer). A graphed step draws its token from its own graph, which record_drawn_logits cannot see; these can."""
    from model import StaticDecoder
    seen = []
    for name in ("prefill", "step"):
        real = getattr(StaticDecoder, name)
        monkeypatch.setattr(StaticDecoder, name,
                            lambda self, *a, _real=real, **kw: seen.append(_real(self, *a, **kw).clone()) or seen[-1])
    return seen


def record_generate_calls(monkeypatch, what) -> list:
    """A list that fills with what(model, args, kwargs) for every GPT.generate call (the call itself goes on)."""
    seen, real = [], GPT.generate

    def spy(self, *args, **kwargs):
        seen.append(what(self, args, kwargs))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(GPT, "generate", spy)
    return seen

"""The static decode step (GPT.decode_step, StaticDecoder) and generation.

Properties: the decode step in each variant's inference form (fused down-projections, absorbed
MLA, Tucker's contracted cores, latent keys rotated as read) gives the logits of the plain
uncached forward to float64 rounding; the inference form follows the weights when they change;
greedy generation gives the same tokens with and without the cache; the CUDA graph replays the
eager step exactly (GPU only). The step through the Triton kernels (decode attention with its cache
write and rotations; decode_linear's matmuls with their norms, activations and residual adds at the
rows it serves, cuBLAS and the fused add + norm elsewhere) equals the forward too: on the CPU through
Triton's interpreter (tests/interpreted.py), on a GPU as compiled, at a batch on each side.
"""

import pytest
import torch
import torch.nn.functional as F

from interpreted import needs_child
from model import GPT, GPTConfig, GroupedQueryAttention, StaticDecoder, TuckerAttention, sample_next
from tiny import record_drawn_logits, record_step_logits

VARIANTS = {
    "mha": dict(attn="mha"),
    "gqa2": dict(attn="gqa", n_kv_head=2),
    "mqa": dict(attn="gqa", n_kv_head=1),
    "mla_q": dict(attn="mla", kv_rank=16, q_rank=24),
    "mla_fullq": dict(attn="mla", kv_rank=16),
    "mla_shared": dict(attn="mla", kv_rank=16, q_rank=24, shared_kv=True),
    "tucker": dict(attn="tucker", tucker_ranks=(2, 16, 8)),
    "tucker_shared": dict(attn="tucker", tucker_ranks=(2, 16, 8), shared_kv=True),
    "tucker_post": dict(attn="tucker", tucker_ranks=(3, 12, 8), tucker_ranks_post=(2, 10, 6)),
}
POSITIONS = [("learned", None), ("rope", None), ("rope", "latent")]
# every variant with every position scheme it has: mla_rope (None: the default, 'decoupled') is an MLA key only
CASES = [(variant, pos_emb, mla_rope) for variant, kw in VARIANTS.items() for pos_emb, mla_rope in POSITIONS
         if mla_rope is None or kw["attn"] == "mla"]


def build(variant: str, pos_emb: str, mla_rope, bias: bool = True, block_size: int = 24, seed: int = 0) -> GPT:
    kw = dict(VARIANTS[variant], pos_emb=pos_emb, bias=bias, n_layer=2, n_head=4, n_embd=32,
              block_size=block_size, vocab_size=50)
    if mla_rope is not None:
        if kw["attn"] != "mla":
            raise ValueError(f"mla_rope is an MLA key; {variant} is {kw['attn']} (parametrize over CASES)")
        kw["mla_rope"] = mla_rope
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**kw)).double().eval()
    # biases start at zero: give them values so that every bias path is exercised
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") and p.dim() == 1:
                p.normal_(0.0, 0.1)
    return model


def sharpen_attention(model: GPT, factor: float = 4.0) -> None:
    """Attention weights scaled up, so that attention is far from a fresh model's near-uniform one and every key
    (and its rotation) shows in the logits: at a float32 tolerance a wrong key rotation otherwise passes."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".attn." in name:
                p.mul_(factor)


def decode_logits(model: GPT, idx: torch.Tensor, prompt: int) -> torch.Tensor:
    """Logits at positions prompt-1 .. T-2 from a prefill of `prompt` tokens and single-token steps."""
    decoder = StaticDecoder(model, idx.size(0))
    out = [decoder.prefill(idx[:, :prompt])]
    for t in range(prompt, idx.size(1) - 1):
        out.append(decoder.step(idx[:, t:t + 1]))
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("variant,pos_emb,mla_rope", CASES)
def test_decode_step_equals_uncached_forward(variant, pos_emb, mla_rope):
    model = build(variant, pos_emb, mla_rope)
    idx = torch.randint(0, 50, (3, 20), generator=torch.Generator().manual_seed(1))
    full, _ = model(idx)  # (3, 20, vocab), no cache
    got = decode_logits(model, idx, prompt=5)
    ref = full[:, 4:19]
    assert (got - ref).abs().max().item() < 1e-10 * ref.abs().max().item()


@pytest.mark.parametrize("variant", ["mla_q", "tucker_shared", "tucker_post"])
def test_inference_form_follows_the_weights(variant, monkeypatch):
    """The contracted cores / absorbed weights are built once, then rebuilt when any weight changes
    in place (load_state_dict, an optimizer step): a stale form would decode with old weights. Once per
    layer and weight version, not once per step."""
    model = build(variant, "rope", None)
    builds, real = [], type(model.transformer.h[0].attn).build_inference_form
    monkeypatch.setattr(type(model.transformer.h[0].attn), "build_inference_form",
                        lambda self: builds.append(self) or real(self))
    idx = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(2))
    before = decode_logits(model, idx, prompt=4)
    assert len(builds) == 2  # one per layer for the 7 steps
    other = build(variant, "rope", None, seed=7)
    model.load_state_dict(other.state_dict())  # in-place copies into the same parameters
    after = decode_logits(model, idx, prompt=4)
    assert len(builds) == 4
    ref = other(idx)[0][:, 3:11]
    assert (after - ref).abs().max().item() < 1e-10
    assert (after - before).abs().max().item() > 1e-3  # the weights did change the output
    # replaced, not written: load_state_dict(assign=True) of fresh tensors (version 0, as torch.load gives them),
    # twice, so that only the new storage tells the new weights from the old
    for seed in (8, 9):
        other = build(variant, "rope", None, seed=seed)
        model.load_state_dict({k: v.clone() for k, v in other.state_dict().items()}, assign=True)
        got = decode_logits(model, idx, prompt=4)
        assert (got - other(idx)[0][:, 3:11]).abs().max().item() < 1e-10


@pytest.mark.parametrize("variant", ["mha", "mla_shared", "tucker_shared"])
def test_greedy_generation_same_with_and_without_cache(variant, monkeypatch):
    """Past block_size as well: the cached path refills from the last block_size // 2 tokens and
    the uncached one crops, so they agree until the first refill; below it they must be equal."""
    model = build(variant, "rope", None, block_size=16)
    idx = torch.randint(0, 50, (2, 3), generator=torch.Generator().manual_seed(3))
    cached = model.generate(idx, 13, temperature=0, decode="eager")
    plain = model.generate(idx, 13, temperature=0, use_cache=False)
    assert torch.equal(cached, plain)
    long = model.generate(idx, 40, temperature=0, decode="eager")  # crosses block_size twice
    assert long.shape == (2, 43) and torch.equal(long[:, :16], plain[:, :16])
    # This tiny model's greedy tokens repeat one id after a step or two, and over a run of one id the window's
    # length or a stale token changes nothing (a step fed the previous token, a refill of 9 rows, passed above).
    # So a sampled run too (its tokens vary, though they follow the noise more than these flat logits), and the
    # logits each token was drawn from against the uncached forward over the window the cache holds (refilled
    # from the last 8 tokens when full).
    seen = record_drawn_logits(monkeypatch)
    drawn = model.generate(idx, 40, temperature=1.0, decode="eager", generator=torch.Generator().manual_seed(4))
    assert len(seen) == 40 and all(len(set(row)) >= 10 for row in drawn[:, 3:].tolist())
    start = 0
    for n in range(3, 43):
        if n - start > 16:  # the cache is full (16 rows): refilled from the last 8 tokens
            start = n - 8
        ref = model(drawn[:, start:n])[0][:, -1]
        assert (seen[n - 3] - ref).abs().max().item() < 1e-10 * ref.abs().max().item(), n


def test_sample_next_top_k_and_greedy():
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0, -2.0], [3.0, 0.0, 0.0, 0.0, 2.9]])
    assert sample_next(logits, 0, None).tolist() == [1, 0]
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_next(logits, 2.0, 2, g) for _ in range(300)])
    assert set(draws[:, 0].tolist()) == {1, 3} and set(draws[:, 1].tolist()) == {0, 4}


@pytest.mark.parametrize("temperature,top_k,vocab_limit", [(0.8, 3, None), (1.0, None, None), (0.5, 2, 5), (2.0, 10, None),
                                                         (1.5, 6, None)])  # top_k = vocab - 1: one token left out
def test_sample_next_draws_from_the_top_k_softmax(temperature, top_k, vocab_limit):
    """200,000 draws (rows of one call, a fixed seed) follow softmax(logits / temperature) over the top_k
    tokens below vocab_limit: each frequency within 5 standard errors, nothing outside that set."""
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, 3.0, 0.7, 5.0])
    n = 200_000
    token = sample_next(logits.expand(n, -1).contiguous(), temperature, top_k, torch.Generator().manual_seed(1),
                        vocab_limit)
    kept = logits[:vocab_limit] if vocab_limit else logits
    allowed = torch.ones_like(kept, dtype=torch.bool)
    if top_k is not None and top_k < kept.numel():
        allowed = kept >= torch.topk(kept, top_k).values[-1]
    ref = F.softmax(torch.where(allowed, kept / temperature, float("-inf")), dim=-1).double()
    freq = torch.bincount(token, minlength=logits.numel()).double() / n
    assert (freq[kept.numel():] == 0).all() and (freq[:kept.numel()][~allowed] == 0).all()
    assert ((freq[:kept.numel()] - ref).abs() <= 5 * (ref * (1 - ref) / n).sqrt() + 1e-12).all()


@pytest.mark.parametrize("temperature", [0.8, 1e-3, 7.0])
def test_sample_next_top_k_set_from_the_raw_logits(temperature):
    """The top_k set is taken on the logits in their own dtype (bf16 here, ties included): float(x) / temperature
    is increasing, so it is the set the float32 scores / temperature would give. Checked through draws: at a
    huge temperature every kept token turns up, and exactly those."""
    g = torch.Generator().manual_seed(2)
    logits = (torch.randn(4, 300, generator=g) * 2).round().to(torch.bfloat16)  # many ties
    k = 40
    lf = logits.float() / temperature
    ref_allowed = lf >= torch.topk(lf, k, dim=-1).values[:, -1:]
    draws = sample_next(logits.repeat_interleave(3000, dim=0), 1e6 * temperature, k, g).view(4, 3000)
    seen = torch.zeros(4, 300, dtype=torch.bool).scatter_(1, draws, True)
    assert torch.equal(seen, ref_allowed)


@pytest.mark.parametrize("temperature", [1e-7, 1e-30])
def test_sample_next_at_a_tiny_temperature(temperature):
    """Two tied top logits stay a fair coin however small the temperature (the row's max comes off before the
    division: 10 / 1e-7 in float32 would round the noise away, 10 / 1e-30 overflow), and nothing is flagged."""
    logits = torch.tensor([10.0, 10.0, 3.0]).expand(100_000, -1).contiguous()
    finite = torch.ones((), dtype=torch.bool)
    token = sample_next(logits, temperature, None, torch.Generator().manual_seed(3), finite=finite)
    counts = torch.bincount(token, minlength=3).tolist()
    assert counts[2] == 0 and abs(counts[0] - 50_000) < 5 * 158 and finite.item()  # 158: sqrt(100k / 4)


def test_sample_next_flags_non_finite_and_generate_raises():
    logits = torch.tensor([[0.0, 1.0, 2.0], [0.0, float("nan"), 1.0]])
    finite = torch.ones((), dtype=torch.bool)
    sample_next(logits[:1], 1.0, None, finite=finite)
    assert finite.item()
    sample_next(logits, 1.0, None, finite=finite)
    assert not finite.item()
    finite = torch.ones((), dtype=torch.bool)
    assert sample_next(logits, 0.0, None, finite=finite).tolist() == [2, 1]  # greedy: argmax takes the nan
    assert not finite.item()  # flagged, though the first row's token is finite
    cases = {(1.0, -float("inf"), 0.0): True, (1.0, float("inf"), 0.0): False,
                                (-float("inf"),) * 3: False, (float("nan"), 1.0, 0.0): False}
    for row, ok in cases.items():
        for temperature, top_k in ((0.8, None), (0.8, 2), (0.0, None)):  # greedy: the chosen logit's finiteness
            finite = torch.ones((), dtype=torch.bool)
            sample_next(torch.tensor([row]), temperature, top_k, finite=finite)
            assert finite.item() == ok, (row, temperature, top_k)
    # a temperature below float32's smallest normal number is greedy (before: (logits - max) / t divided by a
    # rounded 0, nan scores, and generate blamed the model)
    tiny = torch.tensor([[0.0, -1.0, 3.0, 2.5]])
    for t in (1e-50, 1e-300, 1e-39):
        finite = torch.ones((), dtype=torch.bool)
        assert sample_next(tiny, t, None, finite=finite).tolist() == [2] and finite.item(), t
    model = build("tucker", "learned", None)
    with torch.no_grad():
        model.lm_head.weight[3, 0] = float("nan")  # tied to wte: the logits go non-finite from the first step
    idx = torch.zeros(1, 2, dtype=torch.long)
    for temperature in (0.8, 0.0):  # greedy too (before: token 0 every step, printed as text without a word)
        with pytest.raises(RuntimeError, match="inf or nan"):
            model.generate(idx, 3, temperature=temperature, decode="eager")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_sample_next_never_synchronizes_on_cuda():
    logits = torch.randn(2, 50304, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    finite = torch.ones((), dtype=torch.bool, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for temperature, top_k in ((0.8, 200), (1.0, None), (0, None)):
            sample_next(logits, temperature, top_k, g, 50257, finite)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert finite.item()


def test_decode_mode_is_validated():
    model = build("mha", "learned", None)
    idx = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="decode='fast' is unknown: allowed 'auto', 'eager', 'graph', 'mega'"):
        model.generate(idx, 2, decode="fast")
    with pytest.raises(ValueError, match="CUDA"):
        model.generate(idx, 2, decode="graph")
    with pytest.raises(ValueError, match="decode='mega' needs a CUDA"):
        model.generate(idx, 2, decode="mega")
    for kw in (dict(use_cache=False), dict(compile=True)):  # refused before any decoder is built or dropped
        with pytest.raises(ValueError, match="decode='mega' is the cached step as one kernel"):
            model.generate(idx, 2, decode="mega", **kw)
    # a CUDA device however it is spelled (the check reads the device's name: no GPU needed to see it pass)
    from model import check_decode
    for device in ("cuda", "cuda:0", torch.device("cuda", 1)):
        for decode in ("graph", "mega"):
            check_decode(decode, device, False, True)


def test_generate_names_a_prompt_outside_the_vocabulary_a_float_prompt_and_a_float_top_k():
    """generate's own ValueErrors, before any decoder is built: a prompt id outside 0 .. vocab_size - 1 (before: an
    IndexError from inside the embedding on the CPU, a device-side assert on CUDA), a float prompt, a top_k that is no
    int (before: a TypeError from inside torch.topk)."""
    model = build("tucker", "learned", None)
    idx = torch.zeros(2, 3, dtype=torch.long)
    for bad, says in ((50, "token id 50: allowed 0 .. vocab_size - 1 = 49"), (-1, "token id -1")):
        prompt = idx.clone()
        prompt[1, 2] = bad
        for use_cache in (True, False):
            with pytest.raises(ValueError, match=says):
                model.generate(prompt, 2, use_cache=use_cache, decode="eager")
    with pytest.raises(ValueError, match=r"idx of shape \(2, 3\) and dtype torch.float32: allowed"):
        model.generate(idx.float(), 2, decode="eager")
    for top_k in (2.5, True):
        with pytest.raises(ValueError, match=f"top_k={top_k} must be >= 1, an int"):
            model.generate(idx, 2, top_k=top_k, decode="eager")
    assert model.generate(idx.int(), 2, top_k=3, decode="eager").shape == (2, 5)


def test_a_model_that_generated_pickles_without_its_kept_decoder():
    """torch.save(model) / pickle / deepcopy after generate: the decoder generate keeps on the model is left out (after
    generate(compile=True) its step is a torch.compile'd function, which pickle refuses: PicklingError; here a local
    function stands in for it, as unpicklable, without the compile's seconds); the copy decodes the same tokens."""
    import copy
    import io
    model = build("tucker", "learned", None)
    idx = torch.randint(0, 50, (2, 4), generator=torch.Generator().manual_seed(0))
    tokens = model.generate(idx, 6, temperature=0, decode="eager")
    (_, decoder), = model.__dict__["_static_decoders"].values()
    decoder.step_fn = lambda *args, step=decoder.step_fn: step(*args)  # unpicklable, as a compiled step is
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    for copied in (torch.load(buffer, weights_only=False), copy.deepcopy(model)):
        assert "_static_decoders" not in copied.__dict__
        assert torch.equal(copied.generate(idx, 6, temperature=0, decode="eager"), tokens)
    assert model.__dict__["_static_decoders"]  # the original keeps its own


def test_generate_under_inference_mode_and_then_outside_it():
    """A decoder kept by a generate under torch.inference_mode() holds inference tensors (its caches, its position),
    which only inference mode may write in place: the next generate outside it builds its own (before: RuntimeError
    "Inplace update to inference tensor outside InferenceMode"). The same tokens either way."""
    model = build("mla_q", "rope", "decoupled")
    idx = torch.randint(0, 50, (2, 4), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        inside = model.generate(idx, 6, temperature=0, decode="eager")
    assert torch.equal(model.generate(idx, 6, temperature=0, decode="eager"), inside)
    with torch.inference_mode():  # and back: a decoder built outside serves inside too
        assert torch.equal(model.generate(idx, 6, temperature=0, decode="eager"), inside)


def test_a_cpu_process_leaves_dynamo_and_inductor_unimported():
    """A process without CUDA that imports model, builds and trains models with the Triton paths chosen (the fused
    loss head, the GELU kernels, MLA's decoupled-RoPE kernels) imports neither torch._dynamo nor torch._inductor,
    ~2 s of every such process (each test's train.py): the opaque decode calls are marked by model.not_traced, not
    torch.compiler.disable at import, and the kernels' torch.library ops are registered only where a device can run
    them (decode_attention.triton_ops_wanted)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    code = ("import sys, torch, model, train, sample\n"
            "for kw in (dict(attn='tucker', tucker_ranks=(2, 8, 8)), dict(attn='mla', kv_rank=8, pos_emb='rope')):\n"
            "    m = model.GPT(model.GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32, **kw))\n"
            "    x = torch.randint(0, 32, (2, 8))\n"
            "    m(x, x)[1].backward()\n"
            "    m.generate(x[:, :2], 3, decode='eager')\n"
            "print(sorted(m for m in sys.modules if m.startswith(('torch._dynamo', 'torch._inductor'))))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # nothing counts as a Triton device
    env["CUDA_VISIBLE_DEVICES"] = ""  # no CUDA device, as on the CI machine
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_not_traced_made_inside_a_compile_runs_eagerly():
    """A not_traced function first reached inside torch.compile's trace (its torch.compiler.disable made there)
    runs eagerly, with the eager result, then and on later calls; a data-dependent branch in it (traced, a graph
    break or an error under fullgraph) shows it is not traced."""
    from model import not_traced
    seen = []

    @not_traced
    def opaque(x):
        seen.append(torch.compiler.is_compiling())
        return x.sin() if x.sum().item() > 0 else x.cos()

    def f(x):
        return opaque(x * 2) + 1

    compiled = torch.compile(f, backend="eager")
    for x in (torch.ones(5), -torch.ones(5), torch.ones(5)):
        assert torch.equal(compiled(x), f(x))
    assert seen == [False] * 6


def test_compiled_decode_step_runs_the_opaque_calls_eagerly(monkeypatch):
    """StaticDecoder's compiled step (here torch.compile's 'eager' backend: its Dynamo trace, no inductor) gives
    the eager step's logits, and the decode attention and the inference form inside it run eagerly; after
    model.disable_opaque_calls (StaticDecoder's, before its compile) Dynamo compiles no frame of a not_traced
    wrapper (their shared code object would hit its recompile limit)."""
    import decode_attention
    import model as model_module
    wrapper_code = model_module.not_traced(lambda: None).__code__  # every wrapper's
    seen = []
    for name in ("decode_attention", "tucker_decode_attention"):
        real = getattr(decode_attention, name)

        def spy(*args, _real=real, **kwargs):
            seen.append(torch.compiler.is_compiling())
            return _real(*args, **kwargs)
        monkeypatch.setattr(decode_attention, name, spy)
    model = build("tucker", "rope", None)
    idx = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(4))
    eager = decode_logits(model, idx, prompt=4)
    decoder = StaticDecoder(model, idx.size(0))
    model_module.disable_opaque_calls()
    torch._dynamo.reset()  # no compiled frame of an earlier test's (test_not_traced_made_inside_a_compile_runs_eagerly)
    decoder.step_fn = torch.compile(model.decode_step, backend="eager", dynamic=False)
    out = [decoder.prefill(idx[:, :4])]
    out += [decoder.step(idx[:, t:t + 1]) for t in range(4, idx.size(1) - 1)]
    assert torch.equal(torch.stack(out, dim=1), eager)
    assert seen and not any(seen)
    assert torch._C._dynamo.eval_frame._debug_get_cache_entry_list(wrapper_code) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_auto_decodes_through_the_cuda_graph_on_cuda_and_op_by_op_on_the_cpu():
    """decode='auto' (generate's and sample.py's default) replays the captured step on CUDA and runs the step op by
    op on the CPU: the decoder that generate keeps on the model says which it used."""
    model = build("tucker", "rope", None, block_size=64).float()
    for device, graphed in (("cpu", False), ("cuda", True)):
        model.to(device)
        model.generate(torch.randint(0, 50, (2, 5), device=device), 3, temperature=0)
        (decoder,) = [entry[1] for entry in model._static_decoders.values()]
        assert decoder.use_graph is graphed and decoder.mega is None, device


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cuda_graph_replays_the_eager_step(variant, monkeypatch):
    """The captured step gives the eager step's logits bit for bit at every position (float32, then bf16 autocast
    past block_size's refills): these tiny models' greedy tokens repeat one id, so equal tokens alone prove little."""
    model = build(variant, "rope", None, block_size=64).float().cuda()
    idx = torch.randint(0, 50, (2, 5), device="cuda")
    seen = record_step_logits(monkeypatch)
    for new_tokens, dtype in ((40, None), (70, torch.bfloat16)):  # 70: past block_size
        runs = {}
        for decode in ("eager", "graph"):
            seen.clear()
            with torch.autocast("cuda", dtype=dtype) if dtype else torch.autocast("cuda", enabled=False):
                out = model.generate(idx, new_tokens, temperature=0, decode=decode)
            runs[decode] = (out, list(seen))
        (eager, eager_logits), (graph, graph_logits) = runs["eager"], runs["graph"]
        assert torch.equal(eager, graph)
        assert len(eager_logits) == len(graph_logits) == new_tokens
        for n, (a, b) in enumerate(zip(eager_logits, graph_logits)):
            assert torch.equal(a, b), f"{dtype} step {n}: max |eager - graph| {(a - b).abs().max().item():.3g}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("mode", ["graph", "mega"])
@pytest.mark.parametrize("variant", ["mla", "tucker_shared", "mha"])
def test_cuda_decoding_after_a_fused_adamw_step_is_a_fresh_models(variant, mode, monkeypatch):
    """After CUDA's fused AdamW (no version bump) the kept decoder, its captured graph and its inference forms (or
    the one-launch step's stacked weights) decode as a model built fresh from the new weights does: the same
    logits at every step in the same mode (the one launch: within 2% of their largest, its fp32 atomic sums vary in
    their last bits, while the tokens before the step agree; at least 90% of the tokens)."""
    attn = {"mla": dict(attn="mla", kv_rank=16, q_rank=24), "mha": dict(attn="mha"),
            "tucker_shared": dict(attn="tucker", tucker_ranks=(2, 16, 16), shared_kv=True)}[variant]
    config = GPTConfig(n_layer=2, n_head=4, n_embd=64, block_size=64, vocab_size=50, **attn)  # dH 16 (the one launch)
    dtype = torch.bfloat16 if mode == "mega" else torch.float32  # the one launch's weights as sample.py casts them
    torch.manual_seed(0)
    model = GPT(config).eval().to("cuda", dtype)
    idx = torch.randint(0, 50, (2, 5), device="cuda", generator=torch.Generator(device="cuda").manual_seed(3))
    before = model.generate(idx, 20, temperature=0, decode=mode)  # decoder, graph and forms built
    opt = torch.optim.AdamW(model.parameters(), lr=0.2, fused=True)
    y = torch.randint(0, 50, (2, 17), device="cuda", generator=torch.Generator(device="cuda").manual_seed(4))
    model.train()
    model(y[:, :-1], y[:, 1:])[1].backward()
    versions = [p._version for p in model.parameters()]
    opt.step()
    model.eval()
    assert [p._version for p in model.parameters()] == versions  # the case this guards: no bump
    fresh = GPT(config).eval().to("cuda", dtype)
    fresh.load_state_dict(model.state_dict())
    seen = record_step_logits(monkeypatch)
    kept = model.generate(idx, 20, temperature=0, decode=mode)
    kept_logits = list(seen)
    seen.clear()
    new = fresh.generate(idx, 20, temperature=0, decode=mode)
    assert not torch.equal(new, before)  # the step changed the tokens: a stale decoder would be seen
    assert len(kept_logits) == len(seen) == 20
    for n, (a, b) in enumerate(zip(kept_logits, seen)):  # logits n come from the tokens before position 5 + n
        if mode == "graph":
            assert torch.equal(a, b), f"step {n}: max |kept - fresh| {(a - b).abs().max().item():.3g}"
        elif torch.equal(kept[:, :5 + n], new[:, :5 + n]):
            err, scale = (a.float() - b.float()).abs().max().item(), b.float().abs().max().item()
            assert err <= 0.02 * scale, f"step {n}: max |kept - fresh| {err:.3g}, largest logit {scale:.3g}"
    if mode == "graph":
        assert torch.equal(kept, new)
    else:
        assert (kept == new).float().mean().item() >= 0.9


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("variant", ["mha", "tucker"])
def test_cuda_graph_sampling_draws_the_eager_tokens(variant):
    """Sampled decoding with the draw replayed from its own graph (StaticDecoder.sample_graph) gives the eager
    loop's tokens from the same seed, past block_size's refills too, and leaves the generator where eager
    sampling leaves it; with the default generator (none given) the same after torch.cuda.manual_seed."""
    model = build(variant, "rope", None, block_size=64).float().cuda()
    idx = torch.randint(0, 50, (2, 5), device="cuda")
    for top_k in (None, 7):
        runs = {}
        for decode in ("eager", "graph", "graph"):  # the second graph run replays the captured sampler
            g = torch.Generator(device="cuda").manual_seed(11)
            out = model.generate(idx, 90, temperature=0.9, top_k=top_k, decode=decode, generator=g)
            runs.setdefault(decode, []).append((out, g.get_state()))
        for out, state in runs["graph"]:
            assert torch.equal(out, runs["eager"][0][0]) and torch.equal(state, runs["eager"][0][1])
        outs = []
        for decode in ("eager", "graph"):
            torch.cuda.manual_seed(5)
            outs.append(model.generate(idx, 30, temperature=0.9, top_k=top_k, decode=decode))
        assert torch.equal(outs[0], outs[1])
    for seed in range(10):  # a new generator every call: the decoder keeps its 8 newest sampler graphs
        model.generate(idx, 3, temperature=0.9, decode="graph", generator=torch.Generator(device="cuda").manual_seed(seed))
    assert 1 <= len(model.static_decoder(2, idx.device, use_graph=True).samplers) <= 8
    decoder = model.static_decoder(2, idx.device, use_graph=True)
    decoder.finite.fill_(True)
    decoder.logits[1, 4] = float("nan")  # the replayed step's logits only: the sampler graph must and its flag
    decoder.sample_graph(0.9, 7, None, None)
    assert not decoder.finite.item()
    with torch.no_grad():
        model.lm_head.weight[3, 0] = float("nan")
    with pytest.raises(RuntimeError, match="inf or nan"):
        model.generate(torch.full((1, 2), 3, device="cuda"), 5, temperature=0.9, decode="graph")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the Triton decode kernel needs a GPU")
@pytest.mark.parametrize("batch", [3, 6])  # decode_linear's kernel (3 rows of K <= 128), cuBLAS + add_norm above 4
@pytest.mark.parametrize("variant,pos_emb,mla_rope", CASES)
def test_cuda_kernel_decode_equals_uncached_forward(variant, pos_emb, mla_rope, batch, monkeypatch):
    """The decode step through the Triton kernels (cache writes, q and key rotations inside the attention's;
    the matmuls with their norms and residual adds, or cuBLAS with each add fused into the next norm) gives the
    uncached forward's logits, in float32 (the CPU tests check the same through the SDPA fallback)."""
    import decode_attention as da
    import decode_linear as dl
    assert dl.serves_rows(batch, 4 * 32, 32) == (batch == 3)  # the widest K: the MLP's down-projection
    launches = []
    launch = da._launch
    monkeypatch.setattr(da, "_launch", lambda *a, **kw: launches.append(1) or launch(*a, **kw))
    model = build(variant, pos_emb, mla_rope, block_size=64).float().cuda()
    sharpen_attention(model)
    idx = torch.randint(0, 50, (batch, 60), generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        full = model(idx)[0]  # (B, T, vocab)
        got = decode_logits(model, idx, prompt=7)  # (B, T - 7, vocab): positions 6 .. 58
    assert len(launches) == 52 * model.config.n_layer  # every step of every layer through the kernel
    assert (got - full[:, 6:59]).abs().max().item() < 1e-4 * full.abs().max().item()


def test_cache_holds_the_autocast_dtype():
    """fp32 weights under bf16 autocast (how sample.py runs a trained checkpoint): the cache is bf16
    like the keys the layers compute (so the Triton kernel sees one dtype), and the step still
    follows the plain forward (under the same autocast) to bf16 rounding: relative error 0.7e-2 here, at most
    1.9e-2 over build seeds 0-19, against 3e-2. Attention is sharpened, since near-uniform attention hides the
    keys' rotation. Control: the same decode with identity rotation tables (a step that does not rotate)
    misses the forward by 0.41 here (0.35 at the least over seeds 0-19), so the bound catches it."""
    tol = 3e-2
    idx = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(4))

    def model_(rotate=True):
        model = build("tucker_shared", "rope", None).float()
        sharpen_attention(model)
        if not rotate:
            model.rope_cos.fill_(1.0)
            model.rope_sin.fill_(0.0)
        return model

    def rel(a, b):
        return ((a - b).norm() / b.norm()).item()

    model = model_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        decoder = StaticDecoder(model, 2)
        assert all(buf.dtype == torch.bfloat16 for c in decoder.caches for buf in c.store.values())
        got = decode_logits(model, idx, prompt=4).float()
        ref = model(idx)[0][:, 3:11].float()
        unrotated = decode_logits(model_(rotate=False), idx, prompt=4).float()
    assert rel(got, ref) < tol
    assert rel(unrotated, ref) > 3 * tol


@pytest.mark.parametrize("variant", ["mha", "mla_q", "mla_shared", "tucker", "tucker_shared"])
def test_decode_attention_gets_the_caches_dtype_under_autocast(variant, monkeypatch):
    """fp32 weights under bf16 autocast: every decode step hands decode_attention its query, its new key and value
    and the caches in one dtype, bf16, as its Triton kernel takes them (MLA's decoupled rotary dims are rotated
    outside it, by rows of the activation dtype: rotated by float32 rows they came out float32)."""
    import model as model_module
    seen, real = [], model_module.decode_attention
    monkeypatch.setattr(model_module, "decode_attention", lambda q, k, v, *a, **kw: seen.append(
        {q.dtype, k.dtype, v.dtype} | {t.dtype for t in kw["new_kv"] if t is not None}) or real(q, k, v, *a, **kw))
    model = build(variant, "rope", None).float()
    idx = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        decode_logits(model, idx, prompt=3)
    assert len(seen) == 2 * 2 and all(dtypes == {torch.bfloat16} for dtypes in seen), seen


@pytest.mark.parametrize("variant", ["mha", "mla_shared", "tucker_shared"])
def test_activation_checkpointing_same_gradients(variant):
    """activation_checkpointing recomputes each block in the backward: loss and every gradient are
    those of the plain model (float64, dropout 0), with and without RoPE."""
    torch.manual_seed(0)
    for pos_emb in ("learned", "rope"):
        plain = build(variant, pos_emb, None).train()
        ckpt = build(variant, pos_emb, None).train()
        ckpt.config.activation_checkpointing = True
        ckpt.load_state_dict(plain.state_dict())
        idx = torch.randint(0, 50, (2, 16))
        losses, calls = [], []
        for m in (plain, ckpt):
            block, count = m.transformer.h[0], []
            block.forward = lambda *a, _f=block.forward, _c=count, **k: (_c.append(1), _f(*a, **k))[1]
            _, loss = m(idx, targets=idx.roll(-1, dims=1))
            loss.backward()
            losses.append(loss.item())
            calls.append(len(count))
        assert calls == [1, 2]  # checkpointed: the block's forward runs again in the backward
        assert losses[0] == pytest.approx(losses[1], rel=1e-12)
        for (name, a), b in zip(plain.named_parameters(), ckpt.parameters()):
            assert torch.allclose(a.grad, b.grad, rtol=1e-10, atol=1e-14), name


def test_activation_checkpointing_is_validated():
    with pytest.raises(ValueError, match="activation_checkpointing"):
        GPTConfig(activation_checkpointing="yes")


def test_generate_reuses_its_decoder_until_the_weights_change(monkeypatch):
    seen = record_drawn_logits(monkeypatch)
    model = build("tucker_shared", "rope", None)
    idx = torch.randint(0, 50, (2, 4), generator=torch.Generator().manual_seed(5))
    first = model.generate(idx, 10, temperature=0, decode="eager")
    decoder = model.static_decoder(2, idx.device, use_graph=False)
    second = model.generate(idx, 10, temperature=0, decode="eager")  # same decoder, prefilled anew
    assert model.static_decoder(2, idx.device, use_graph=False) is decoder
    assert torch.equal(first, second) and torch.equal(torch.stack(seen[:10]), torch.stack(seen[10:]))
    other = build("tucker_shared", "rope", None, seed=7)
    model.load_state_dict(other.state_dict())
    assert model.static_decoder(2, idx.device, use_graph=False) is not decoder
    assert torch.equal(model.generate(idx, 10, temperature=0, decode="eager"),
                       other.generate(idx, 10, temperature=0, decode="eager"))


@pytest.mark.parametrize("write", ["fused_adamw", "data"])
@pytest.mark.parametrize("variant", ["mla_q", "tucker", "mha"])
def test_generate_sees_weights_written_without_a_version_bump(variant, write, monkeypatch):
    """torch's fused AdamW (train.py's on CUDA) changes weights in place without bumping their version counters, on
    which the inference forms and the kept decoders are keyed: its steps are counted (a post-step hook) and generate
    rebuilds, so the cached tokens after the step are the uncached ones (before the mend MLA and Tucker decoded with
    their forms of before the step). Writes through p.data bump nothing either: model.note_weight_changes() says so."""
    model = build(variant, "rope", None).float()
    idx = torch.randint(0, 50, (2, 4), generator=torch.Generator().manual_seed(5))
    before = model.generate(idx, 12, temperature=0, decode="eager")  # forms and decoder built
    params = list(model.parameters())
    versions = [p._version for p in params]
    if write == "fused_adamw":
        opt = torch.optim.AdamW(params, lr=0.2, fused=True)
        y = torch.randint(0, 50, (2, 17), generator=torch.Generator().manual_seed(6))
        model.train()
        model(y[:, :-1], y[:, 1:])[1].backward()
        opt.step()
        model.eval()
    else:
        g = torch.Generator().manual_seed(6)
        for p in params:
            p.data.add_(0.5 * torch.randn(p.shape, generator=g))
    assert [p._version for p in params] == versions  # the write bumped nothing: the case this guards
    if write == "data":
        model.note_weight_changes()
    seen = record_drawn_logits(monkeypatch)  # a partly stale layer can give the same repeated token
    cached = model.generate(idx, 12, temperature=0, decode="eager")
    assert torch.equal(cached, model.generate(idx, 12, temperature=0, use_cache=False))
    got, ref = torch.stack(seen[:12]), torch.stack(seen[12:])
    assert (got - ref).abs().max().item() < 1e-5 * ref.abs().max().item()
    assert not torch.equal(cached, before)  # the write did change the tokens


@pytest.mark.parametrize("bad", [-1, 2.0, True])
def test_generate_refuses_a_bad_max_new_tokens(bad):
    model = build("tucker", "learned", None)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), bad)
    assert model.generate(torch.zeros(1, 2, dtype=torch.long), 0).shape == (1, 2)  # nothing to add: the prompt


@pytest.mark.parametrize("shape", [(1, 0), (0, 3), (4,)])
def test_generate_refuses_a_prompt_of_no_tokens_or_the_wrong_shape(shape):
    """An empty prompt was an IndexError deep inside the loop."""
    with pytest.raises(ValueError, match=r"allowed \(B, T\)"):
        build("mha", "learned", None).generate(torch.zeros(shape, dtype=torch.long), 3)


def test_a_fused_step_anywhere_rebuilds_the_kept_decoder_once():
    """A fused optimizer's step (any model's: the count is the process's) makes the next generate rebuild its decoder,
    once; generate calls with no write between them keep it; a foreach step bumps the counters itself."""
    import model as model_module
    model = build("tucker", "learned", None)
    idx = torch.randint(0, 50, (1, 3), generator=torch.Generator().manual_seed(1))
    model.generate(idx, 4, temperature=0, decode="eager")
    decoder = model.static_decoder(1, idx.device, use_graph=False)
    model.generate(idx, 4, temperature=0, decode="eager")
    assert model.static_decoder(1, idx.device, use_graph=False) is decoder
    other = torch.nn.Linear(3, 3)
    count = model_module._UNTRACKED_WRITES[0]
    for fused, counted in ((False, 0), (True, 1)):
        opt = torch.optim.AdamW(other.parameters(), fused=fused)
        other(torch.ones(1, 3)).sum().backward()
        opt.step()
        assert model_module._UNTRACKED_WRITES[0] == count + counted
    model.generate(idx, 4, temperature=0, decode="eager")
    rebuilt = model.static_decoder(1, idx.device, use_graph=False)
    assert rebuilt is not decoder
    model.generate(idx, 4, temperature=0, decode="eager")
    assert model.static_decoder(1, idx.device, use_graph=False) is rebuilt


def switched_decode_equals_forward(model: GPT, switch: str, seed: int, value: bool = True) -> torch.Tensor:
    """Set a TuckerAttention decode switch to `value` in every layer (from the other value): the model
    gets a new decoder (a captured graph holds the old path) and its decode logits equal the uncached
    forward's. Returns the tokens."""
    idx = torch.randint(0, 50, (3, 14), generator=torch.Generator().manual_seed(seed))
    for block in model.transformer.h:
        setattr(block.attn, switch, not value)
    before = model.static_decoder(3, idx.device, use_graph=False)
    for block in model.transformer.h:
        setattr(block.attn, switch, value)
    assert model.static_decoder(3, idx.device, use_graph=False) is not before
    got = decode_logits(model, idx, prompt=4)
    ref = model(idx)[0][:, 3:13]
    assert (got - ref).abs().max().item() < 1e-10 * ref.abs().max().item()
    return idx


@pytest.mark.parametrize("variant,pos_emb", [("tucker_shared", "rope"), ("tucker_shared", "learned"),
                                             ("tucker", "learned"), ("tucker_post", "learned")])
def test_fused_tucker_decode_equals_uncached_forward(variant, pos_emb, monkeypatch):
    """TuckerAttention.fused_decode: the per-head query and output cores inside
    decode_attention.tucker_decode_attention (its torch composition on the CPU) give the forward's
    logits; a model switched to it gets a new decoder (a captured graph holds the old path). The switch
    takes that path over the merged form (these ranks' default): every layer of every step calls it."""
    import model as model_module
    calls, real = [], model_module.tucker_decode_attention
    monkeypatch.setattr(model_module, "tucker_decode_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    model = build(variant, pos_emb, None)
    assert all(block.attn.merged_at(3) for block in model.transformer.h)
    switched_decode_equals_forward(model, "fused_decode", seed=6)
    assert len(calls) == 2 * 9  # 2 layers x the 9 single-token steps of decode_logits(prompt=4) over 14 tokens


@pytest.mark.parametrize("pos_emb,mla_rope", POSITIONS)
@pytest.mark.parametrize("variant", ["mla_q", "mla_fullq", "mla_shared"])
def test_merged_mla_decode_equals_uncached_forward(variant, pos_emb, mla_rope):
    """LatentAttention.merged_decode: everything x feeds (q_i W_UK,i^T for every head, the rotary query, the
    latents, the rotary key) from one matrix, W_UV and W_O as one: the forward's logits, with every bias and
    RoPE setting; the merged matrices follow the weights."""
    model = build(variant, pos_emb, mla_rope)
    attn = model.transformer.h[0].attn
    assert attn.merged_decode == (attn.n_head * attn.kv_rank <= 2 * 32)  # the default: up to nH dcK = 2d
    idx = switched_decode_equals_forward(model, "merged_decode", seed=10)
    nH, dc, dR = attn.n_head, attn.kv_rank, attn.rope_head_dim
    form = attn.merged_form()
    width = nH * dc + nH * dR + dc * (1 if attn.shared_kv else 2) + dR
    assert form["W_in"].shape == (width, 32) and form["W_out"].shape == (32, nH * dc)
    other = build(variant, pos_emb, mla_rope, seed=3)  # new weights: new merged matrices
    model.load_state_dict(other.state_dict())
    assert "W_in" not in attn.inference_form()
    got = decode_logits(model, idx, prompt=4)
    ref = other(idx)[0][:, 3:13]
    assert (got - ref).abs().max().item() < 1e-10 * ref.abs().max().item()
    assert form["b_in"] is not None and form["b_out"] is not None  # build() gives the layer biases


@pytest.mark.parametrize("pos_emb,mla_rope", POSITIONS)
def test_merged_mla_without_biases_has_none(pos_emb, mla_rope):
    """bias=False: the merged maps are linear, stored without a bias (one plain GEMM each), and exact."""
    model = build("mla_shared", pos_emb, mla_rope, bias=False)
    attn = model.transformer.h[0].attn
    switched_decode_equals_forward(model, "merged_decode", seed=11)  # the logits: the forward's
    form = attn.merged_form()
    assert form["b_in"] is None and form["b_out"] is None


@pytest.mark.parametrize("pos_emb,mla_rope", POSITIONS)
def test_unmerged_mla_decode_equals_uncached_forward(pos_emb, mla_rope):
    """merged_decode=False: the absorbed MLA step with its five matmuls also gives the forward's logits."""
    switched_decode_equals_forward(build("mla_q", pos_emb, mla_rope), "merged_decode", seed=11, value=False)


@pytest.mark.parametrize("variant,merged", [("mla_q", True), ("mla_shared", True), ("tucker", True),
                                            ("tucker_post", False), ("mla_q", False)])
def test_inference_form_first_built_under_autocast_stays_exact(variant, merged):
    """The forms are cached: one first asked for inside autocast (sample.py --dtype=float16 over float32
    weights) must still be the float32 products, or every later float32 decode would carry bf16 rounding."""
    model = build(variant, "rope", None).float()
    for block in model.transformer.h:
        block.attn.merged_decode = merged
    attn = model.transformer.h[0].attn
    with torch.autocast("cpu", dtype=torch.bfloat16):
        attn.merged_form() if merged else attn.inference_form()
    idx = torch.randint(0, 50, (3, 14), generator=torch.Generator().manual_seed(8))
    got = decode_logits(model, idx, prompt=4)
    ref = model(idx)[0][:, 3:13]
    assert (got - ref).abs().max().item() < 1e-5 * ref.abs().max().item()  # bf16-built forms: ~1e-2


def test_tucker_merged_by_default_only_within_mha_sizes():
    """The merged form is the default only where the merged matrices are no larger than MHA's W_Q and W_O
    (r3, r~3 <= dH), at any batch; merged_decode, once set, decides at every batch."""
    base = dict(attn="tucker", n_layer=1, n_head=4, n_embd=32, block_size=8, vocab_size=50)  # dH = 8
    for batch in (1, 4, 5, 32):
        assert GPT(GPTConfig(**base, tucker_ranks=(2, 16, 8))).transformer.h[0].attn.merged_at(batch)
        assert not GPT(GPTConfig(**base, tucker_ranks=(2, 16, 16))).transformer.h[0].attn.merged_at(batch)
        assert not GPT(GPTConfig(**base, tucker_ranks=(2, 16, 8),
                                 tucker_ranks_post=(2, 8, 12))).transformer.h[0].attn.merged_at(batch)
    attn = GPT(GPTConfig(**base, tucker_ranks=(2, 16, 8))).transformer.h[0].attn
    assert attn.merged_decode is None
    attn.merged_decode = False
    assert not any(attn.merged_at(batch) for batch in (1, 5, 32))
    attn = GPT(GPTConfig(**base, tucker_ranks=(2, 16, 16))).transformer.h[0].attn
    attn.merged_decode = True
    assert all(attn.merged_at(batch) for batch in (1, 5, 32))


def test_tucker_merged_by_default_only_where_it_adds_few_elements(monkeypatch):
    """...and, at the batches decode_linear's GEMV serves (decode_linear_serves), where each merged matrix adds at most
    TUCKER_MERGE_MAX_EXTRA elements to the factors it replaces: GPT-2 124M's Tucker [8,64,64] merges, LLaMA-3 1B's
    Tucker rows (d 2048, 32 heads) decode factored there (1-4 sequences: their down-projections are small enough at
    3-4) and merged at more (cuBLAS's GEMMs), but for [32,128,128], larger merged than MHA's matrices; the bound
    sits exactly at the count d nH r3 - (d r2 + r2 nH r3) (the query side; the output side likewise)."""
    import model as model_module

    def merged(batch=1, **kw):
        with torch.device("meta"):
            attn = GPT(GPTConfig(attn="tucker", n_layer=1, block_size=8, vocab_size=50, **kw)).transformer.h[0].attn
        return attn.merged_at(batch)
    assert merged(n_head=12, n_embd=768, tucker_ranks=(8, 64, 64))  # 491,520 more elements a matrix
    for ranks in ((32, 64, 64), (32, 128, 64)):  # 3.9M / 3.7M more
        assert not merged(n_head=32, n_embd=2048, tucker_ranks=ranks)
        assert not merged(4, n_head=32, n_embd=2048, tucker_ranks=ranks)  # W_down (2048, 256): decode_linear's
        assert merged(5, n_head=32, n_embd=2048, tucker_ranks=ranks)  # 5+ rows: cuBLAS's GEMMs
    assert not merged(32, n_head=32, n_embd=2048, tucker_ranks=(32, 128, 128))  # nH r3 = 4096 > d
    d, nH, r2, r3 = 64, 4, 4, 16  # query side 64*64 - (64*4 + 4*64) = 3584; output side with r~2 = 8: 3072
    extra = d * nH * r3 - (d * r2 + r2 * nH * r3)
    kw = dict(n_head=nH, n_embd=d, tucker_ranks=(2, r2, r3), tucker_ranks_post=(2, 8, r3))
    monkeypatch.setattr(model_module, "TUCKER_MERGE_MAX_EXTRA", extra)
    assert merged(**kw)
    monkeypatch.setattr(model_module, "TUCKER_MERGE_MAX_EXTRA", extra - 1)
    assert not merged(**kw)
    # the output side binding (r2 = 8, r~2 = 2): query side 64*64 - (64*8 + 8*64) = 3072, output side 64*64 - (64*2 +
    # 2*64) = 3840
    kw_o = dict(n_head=nH, n_embd=d, tucker_ranks=(2, 8, r3), tucker_ranks_post=(2, 2, r3))
    monkeypatch.setattr(model_module, "TUCKER_MERGE_MAX_EXTRA", 3840)
    assert merged(**kw_o)
    monkeypatch.setattr(model_module, "TUCKER_MERGE_MAX_EXTRA", 3839)
    assert not merged(**kw_o)


@pytest.mark.parametrize("shared_kv", [False, True])
def test_tucker_form_asks_about_its_own_down_projection(shared_kv, monkeypatch):
    """merged_at asks decode_linear whether the GEMV serves the factored down-projection W_down = [U2 | U3 (| U~3)]
    (d, r2 + r3 (+ r~3)) at the batch: with 3-4 rows served only by the weight's size, the form switches exactly at
    d (r2 + r3 (+ r~3)) elements (shared KV: no U~3)."""
    import decode_linear as dl
    import model as model_module
    monkeypatch.setattr(model_module, "TUCKER_MERGE_MAX_EXTRA", -(1 << 30))  # the GEMV's batches: always factored
    monkeypatch.setattr(dl, "WIDE_ROWS_MAX_K", 16)  # K = d = 64 past it: 3-4 rows decided by the weight's size
    d, r2, r3 = 64, 4, 16
    config = GPTConfig(attn="tucker", n_layer=1, block_size=8, vocab_size=50, n_head=4, n_embd=d,
                       tucker_ranks=(2, r2, r3), tucker_ranks_post=(2, 8, r3), shared_kv=shared_kv)
    attn = GPT(config).transformer.h[0].attn
    down = d * (r2 + r3 + (0 if shared_kv else r3))
    assert attn.inference_form()["W_down"].shape == (d, down // d)
    monkeypatch.setattr(dl, "WIDE_ROWS_MAX_WEIGHT", down)
    assert (attn.merged_at(2), attn.merged_at(3), attn.merged_at(5)) == (False, False, True)
    monkeypatch.setattr(dl, "WIDE_ROWS_MAX_WEIGHT", down - 1)
    assert (attn.merged_at(2), attn.merged_at(3), attn.merged_at(5)) == (False, True, True)


@pytest.mark.parametrize("variant", ["tucker", "tucker_shared"])
def test_tucker_default_form_follows_the_batch(variant, monkeypatch):
    """Where a merged matrix adds more than TUCKER_MERGE_MAX_EXTRA elements (LLaMA-1B's [32,*,64] rows), the default
    step is factored at the batches decode_linear's GEMV serves and merged above them; either gives the forward's
    logits, and the merged matrices are built only once a batch asks for them."""
    import model as model_module
    monkeypatch.setattr(model_module, "TUCKER_MERGE_MAX_EXTRA", -(1 << 30))  # read as each layer is built
    model = build(variant, "rope", None)
    attn = model.transformer.h[0].attn
    rows = 4  # decode_linear's MAX_ROWS: the GEMV serves these models' rows (K = 32) up to it
    assert model_module.decode_linear_serves(rows, 32, 32) and not model_module.decode_linear_serves(rows + 1, 32, 32)
    assert (attn.merged_at(rows), attn.merged_at(rows + 1)) == (False, True)
    for batch, merged in ((rows, False), (rows + 1, True)):
        idx = torch.randint(0, 50, (batch, 12), generator=torch.Generator().manual_seed(batch))
        got = decode_logits(model, idx, prompt=4)
        ref = model(idx)[0][:, 3:11]
        assert (got - ref).abs().max().item() < 1e-10 * ref.abs().max().item()
        assert ("merged" in attn.inference_form()) == merged, batch


@pytest.mark.parametrize("variant,pos_emb", [("tucker", "rope"), ("tucker_shared", "rope"), ("tucker_post", "learned")])
def test_factored_tucker_decode_equals_uncached_forward(variant, pos_emb):
    """merged_decode=False (these ranks' default is the merged form): the factored inference form, the
    query core and the output core as their own matmuls, also gives the forward's logits."""
    assert all(block.attn.merged_at(3) for block in build(variant, pos_emb, None).transformer.h)
    switched_decode_equals_forward(build(variant, pos_emb, None), "merged_decode", seed=9, value=False)
    form = build(variant, pos_emb, None).transformer.h[0].attn.inference_form()
    for key in ("W_down", "G_q", "G_o", "U_out"):  # (K, N) stored as contiguous (N, K): decode_linear's weight layout
        assert form[key].t().is_contiguous(), key


def test_split_kernel_overlaps_only_a_short_kernel(monkeypatch):
    """decode_attention's pdl_split (the split kernel launched to overlap the kernel before it) is asked for by Tucker's
    factored step alone, whose queries come from G_q's short matmul, at up to TUCKER_PDL_SPLIT_ROWS sequences; its
    merged step and GQA's follow a wide one."""
    import decode_attention as da
    import model as model_module
    rows = model_module.TUCKER_PDL_SPLIT_ROWS
    asked = []
    real = da.decode_attention
    monkeypatch.setattr(da, "decode_attention", lambda *a, pdl_split=False, **kw: asked.append(pdl_split) or real(*a, **kw))
    for variant, merged, batch, expected in (("tucker", False, 2, True), ("tucker", True, 2, False),
                                             ("gqa2", None, 2, False), ("tucker", False, rows, True),
                                             ("tucker", False, rows + 1, False)):
        # (above TUCKER_PDL_SPLIT_ROWS sequences the split kernel overlapping G_q's GEMM slows it down)
        idx = torch.randint(0, 50, (batch, 8), generator=torch.Generator().manual_seed(3))
        model = build(variant, "rope", None)
        if merged is not None:
            for block in model.transformer.h:
                block.attn.merged_decode = merged
        asked.clear()
        got = decode_logits(model, idx, prompt=5)  # 2 steps of 2 layers
        assert asked == [expected] * 4, (variant, batch)
        assert (got - model(idx)[0][:, 4:7]).abs().max().item() < 1e-10


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the Triton decode kernels need a GPU")
@pytest.mark.parametrize("variant", ["tucker", "tucker_shared", "tucker_post"])
def test_cuda_factored_tucker_step_graph_equals_eager(variant, monkeypatch):
    """Tucker's factored step (LLaMA-1B's default form; its split kernel launched to overlap G_q's matmul): the
    uncached forward's logits in float32, and in bf16 a captured graph's steps are the eager steps' bits, and so are
    the eager steps without programmatic dependent launch (an early-started kernel reads nothing before it is written)."""
    import decode_attention as da
    model = build(variant, "rope", None, block_size=64).float().cuda()
    for block in model.transformer.h:
        block.attn.merged_decode = False
    sharpen_attention(model)
    idx = torch.randint(0, 50, (3, 40), generator=torch.Generator().manual_seed(2)).cuda()
    with torch.no_grad():
        full = model(idx)[0]
        got = decode_logits(model, idx, prompt=7)
    assert (got - full[:, 6:39]).abs().max().item() < 1e-4 * full.abs().max().item()
    model = model.bfloat16()
    outs = {}
    for decode, pdl in (("eager", da.PDL), ("graph", da.PDL), ("eager_no_pdl", False)):
        monkeypatch.setattr(da, "PDL", pdl)
        with torch.no_grad():
            decoder = StaticDecoder(model, 3, device="cuda", use_graph=decode == "graph")
            steps = [decoder.prefill(idx[:, :7]).clone()]
            steps += [decoder.step(idx[:, t:t + 1]).clone() for t in range(7, 39)]
        outs[decode] = torch.stack(steps)
    for other in ("graph", "eager_no_pdl"):
        assert torch.equal(outs["eager"], outs[other]), (other, (outs["eager"] - outs[other]).abs().max().item())


@pytest.mark.parametrize("variant,pos_emb", [("tucker", "rope"), ("tucker_shared", "rope"), ("tucker_post", "learned"),
                                             ("tucker_shared", "learned")])
def test_merged_tucker_decode_equals_uncached_forward(variant, pos_emb):
    """TuckerAttention.merged_decode: the query core merged into the down-projection and the output core
    into U~2 (two matmuls per layer, not four) gives the forward's logits; the merged matrices follow the
    weights, and a model switched to it gets a new decoder (a captured graph holds the old path)."""
    model = build(variant, pos_emb, None)
    idx = switched_decode_equals_forward(model, "merged_decode", seed=8)
    attn = model.transformer.h[0].attn
    nH, (_, _, r3), (_, _, p3) = attn.n_head, attn.ranks, attn.ranks_post
    form = attn.merged_form()
    assert form["W_qkv"].shape == (32, nH * r3 + r3 + (0 if attn.shared_kv else p3))
    assert form["W_out"].shape == (nH * p3, 32)
    other = build(variant, pos_emb, None, seed=3)  # new weights: new merged matrices, the new model's logits
    model.load_state_dict(other.state_dict())
    assert "W_qkv" not in attn.inference_form()
    got = decode_logits(model, idx, prompt=4)
    ref = other(idx)[0][:, 3:13]
    assert (got - ref).abs().max().item() < 1e-10 * ref.abs().max().item()


# ----------------------------------------------------------------------------------------
# The decode step through the Triton kernels on the CPU (Triton's interpreter: tests/test_interpreted.py runs
# these in its child process)


INTERP_DECODE = [("mha", "rope", None), ("gqa2", "learned", None), ("tucker", "rope", None),
                 ("tucker_shared", "rope", None), ("tucker_post", "learned", None), ("mla_shared", "rope", "latent"),
                 ("mla_q", "rope", None), ("tucker_factored", "rope", None),  # _factored: merged_decode off
                 ("gqa2_mixed", "learned", None),  # _mixed: 3 sequences, the MLP's down-projection on the torch ops
                 ("gqa2_wide", "learned", None),  # _wide: 3 sequences, the down-projection at WIDE_ROWS_MAX_WEIGHT
                 ("gqa2_large", "learned", None)]  # _large: 2 sequences, weights over d x d on the torch ops


@needs_child
@pytest.mark.parametrize("variant,pos_emb,mla_rope", INTERP_DECODE)
def test_interp_kernel_decode_equals_uncached_forward(variant, pos_emb, mla_rope, monkeypatch):
    """Every decode path's arguments to the kernels (which of q, the new key and the cached keys to rotate, the
    cache write, shared or separate K/V, each sublayer's norm, matmuls, activation and residual add): the kernels'
    logits are the forward's (float32). 'auto' takes SDPA and the torch ops on the CPU: forced to the kernels."""
    import decode_attention as da
    import decode_linear as dl
    launches = {"attention": 0, "linear": 0}
    launch, config = da._launch, dl._config

    def count(key, result):
        launches[key] += 1
        return result
    monkeypatch.setattr(da, "decode_backend", lambda q, k, v: "triton" if da._unsupported(q, k, v) is None else "sdpa")
    monkeypatch.setattr(da, "_launch", lambda *a, **kw: count("attention", launch(*a, **kw)))
    monkeypatch.setattr(dl, "ENABLED", True)
    monkeypatch.setattr(dl, "decode_linear_backend",  # the kernel wherever it can run (CPU: the interpreter)
                        lambda a, w, b=None, **kw: "triton" if dl._unsupported(
                            a, w, b, kw.get("norm"), kw.get("act"), kw.get("weight2"), kw.get("bias2"),
                            kw.get("residual")) is None else "torch")
    monkeypatch.setattr(dl, "_config", lambda *a: count("linear", config(*a)))  # once per kernel launch
    mixed = variant.endswith("_mixed")  # 3 rows of K = 128 (the MLP's hidden) then not served: cuBLAS's place, its
    if mixed or variant.endswith("_wide"):  # residual add left pending for the next norm, every other matmul (K = 32)
        monkeypatch.setattr(dl, "WIDE_ROWS_MAX_K", 64)  # in the kernel; _wide: its weight (32 x 128) at the bound
        monkeypatch.setattr(dl, "WIDE_ROWS_MAX_WEIGHT", 32 * 128 - (1 if mixed else 0))  # on the kernel's side
    large = variant.endswith("_large")  # the bound on a weight served at more than 1 row (an LM head's place) at
    if large:  # d x d: only the attention's output projection (+ residual) in the kernel, at the bound; QKV, the
        monkeypatch.setattr(dl, "MULTI_ROW_MAX_WEIGHT", 32 * 32)  # MLP's and the LM head on the torch ops
    model = build(variant.split("_")[0] if variant.startswith("gqa2_") else variant.removesuffix("_factored"),
                  pos_emb, mla_rope, block_size=16).float()
    if variant.endswith("_factored"):  # Tucker's factored form (LLaMA-1B's default): W_down, G_q, G_o, U~2 kernels
        for block in model.transformer.h:
            block.attn.merged_decode = False
    sharpen_attention(model)
    steps = 3  # each interpreted step is seconds of the CI budget
    rows = 3 if mixed or variant.endswith("_wide") else 2
    idx = torch.randint(0, 50, (rows, 5 + steps), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = model(idx)[0]
        got = decode_logits(model, idx, prompt=4)  # the prefill's last logits, then `steps` decode steps
    L = model.config.n_layer
    assert launches["attention"] == steps * L  # every step of every layer through the kernel

    def kernels(attn):  # decode_linear launches of one attention sublayer: its input and output matmuls
        if isinstance(attn, GroupedQueryAttention):
            return 2
        if isinstance(attn, TuckerAttention):  # merged, or fused cores: 2; factored: W_down (+ norm), G_q, G_o, U~2
            fused = attn.fused_decode and (attn.shared_kv or not attn.rope)  # (+ residual); TuckerAttention.decode
            return 2 if fused or (attn.merged_at(idx.size(0)) and not attn.fused_decode) else 4
        return 2 if attn.merged_decode else 0  # MLA factored: its products as torch ops, a pending add
    # per step: each attention's, the MLP's two (norm + fc + GELU, proj + residual; _mixed: proj on the torch ops),
    # the logits
    per_step = sum(kernels(block.attn) + (1 if mixed else 2) for block in model.transformer.h) + 1
    if large:  # one launch a layer: the output projection (d x d, at the bound)
        per_step = model.config.n_layer
    assert launches["linear"] == steps * per_step
    assert (got - full[:, 3:4 + steps]).abs().max().item() < 1e-5 * full.abs().max().item()

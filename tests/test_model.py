"""model.py: the paper's theorems as tests, KV cache vs full forward, counts vs Table 1, errors."""
import math

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from model import ATTENTION, GPT, GPTConfig, LayerCache, apply_rope, apply_rope_wide, rope_cache, wide_rope_rows
from tensor_forms import attention_tensors, head_factors, to_tucker, tucker_config_of
from tiny import TINY, make, record_drawn_logits, rel_err, tokens  # noqa: E402


# every family x position scheme (id, GPTConfig overrides)
VARIANTS = [
    ("mha", dict(attn="mha")),
    ("gqa2", dict(attn="gqa", n_kv_head=2)),
    ("mqa", dict(attn="gqa", n_kv_head=1)),
    ("mla_sep", dict(attn="mla", q_rank=12, kv_rank=10)),
    ("mla_shared", dict(attn="mla", q_rank=12, kv_rank=10, shared_kv=True)),
    ("mla_fullq", dict(attn="mla", kv_rank=10)),
    ("tucker_sep", dict(attn="tucker", tucker_ranks=(3, 12, 10), tucker_ranks_post=(2, 14, 6))),
    ("tucker_shared", dict(attn="tucker", tucker_ranks=(3, 12, 10), shared_kv=True)),
]
ROPE_VARIANTS = [
    ("mha_rope", dict(attn="mha", pos_emb="rope")),
    ("gqa2_rope", dict(attn="gqa", n_kv_head=2, pos_emb="rope")),
    ("mla_sep_decoupled", dict(attn="mla", q_rank=12, kv_rank=10, pos_emb="rope", rope_head_dim=4)),
    ("mla_shared_decoupled", dict(attn="mla", q_rank=12, kv_rank=10, shared_kv=True, pos_emb="rope")),
    ("mla_sep_latent", dict(attn="mla", q_rank=12, kv_rank=10, pos_emb="rope", mla_rope="latent")),
    ("mla_shared_latent", dict(attn="mla", q_rank=12, kv_rank=10, shared_kv=True, pos_emb="rope", mla_rope="latent")),
    ("tucker_sep_rope", dict(attn="tucker", tucker_ranks=(3, 12, 10), tucker_ranks_post=(2, 14, 6), pos_emb="rope")),
    ("tucker_shared_rope", dict(attn="tucker", tucker_ranks=(3, 12, 10), shared_kv=True, pos_emb="rope")),
]
ALL = VARIANTS + ROPE_VARIANTS


# ---------------------------------------------------------------------------------------
# Theorems: MHA, GQA and MLA are Tucker at the ranks of section 2.2 (float64, exact)


@torch.no_grad()
def change_head_bases(tucker, seed=0):
    """U1 -> U1 M, C -> C x1 M^-1 and U~1 -> U~1 N, C~ -> C~ x1 N^-1 with random invertible M != N:
    the same attention, but U1 and U~1 are no longer the identity (nor equal), so a forward that
    used one in place of the other would be caught."""
    g = torch.Generator().manual_seed(seed)
    for block in tucker.transformer.h:
        w = block.attn.per_head_weights()
        for U, C in ((w["U1"], w["core"]), (w["U1_post"], w["core_post"])):
            r = U.size(1)
            M = torch.randn(r, r, generator=g, dtype=U.dtype) + r * torch.eye(r, dtype=U.dtype)  # well conditioned
            U.copy_(U @ M)
            C.copy_(torch.einsum("ab,bjk->ajk", torch.linalg.inv(M), C))
        assert not torch.allclose(w["U1"], w["U1_post"])


@pytest.mark.parametrize("overrides,says", [
    (dict(attn="mla", kv_rank=7, pos_emb="rope"), "keeps positions only"),  # decoupled RoPE, odd kv_rank
    (dict(attn="mha", pos_emb="rope"), "keeps positions only"),
    (dict(attn="mha", bias=True), "needs bias=False"),
    # mla_rope is inert outside MLA (a config file may still set it): head-dim RoPE stays refused
    (dict(attn="mha", pos_emb="rope", mla_rope="latent"), "keeps positions only"),
    (dict(attn="gqa", n_kv_head=2, pos_emb="rope", mla_rope="latent"), "keeps positions only"),
    (dict(attn="tucker", tucker_ranks=(3, 12, 10)), "already Tucker"),
])
def test_to_tucker_names_why_a_model_has_no_exact_form(overrides, says):
    """The conversion's own reason, before the Tucker config's checks (an odd kv_rank under decoupled RoPE was
    named as an odd tucker_ranks[2], which the user never gave)."""
    with pytest.raises(ValueError, match=says):
        to_tucker(make(overrides))


@pytest.mark.parametrize("name,overrides", [
    ("mha", dict(attn="mha")),  # Lemma B.1 / Theorem B.2: ranks (nH, d, d)
    ("gqa2", dict(attn="gqa", n_kv_head=2)),  # Theorem B.3: (nH, d, nG dH)
    ("mqa", dict(attn="gqa", n_kv_head=1)),
    ("mla_sep", dict(attn="mla", q_rank=12, kv_rank=10)),  # Theorem B.4: (nH, dcQ, dcK) / (nH, d, dcK)
    ("mla_shared", dict(attn="mla", q_rank=12, kv_rank=10, shared_kv=True)),
    ("mla_fullq", dict(attn="mla", kv_rank=10)),  # (nH, d, dcK)
    ("mla_latent_rope", dict(attn="mla", q_rank=12, kv_rank=10, pos_emb="rope", mla_rope="latent")),
    ("mla_shared_latent_rope", dict(attn="mla", q_rank=12, kv_rank=10, shared_kv=True, pos_emb="rope",
                                    mla_rope="latent")),
])
def test_exact_tucker_form(name, overrides):
    model = make(overrides)
    tucker = to_tucker(model)
    change_head_bases(tucker)
    d, nH, dH = TINY["n_embd"], TINY["n_head"], TINY["n_embd"] // TINY["n_head"]
    expected = {"mha": ((nH, d, d),) * 2, "gqa2": ((nH, d, 2 * dH),) * 2, "mqa": ((nH, d, dH),) * 2,
                "mla_fullq": ((nH, d, 10), (nH, d, 10))}.get(name, ((nH, 12, 10), (nH, d, 10)))
    assert (tucker.config.tucker_ranks, tucker.config.tucker_ranks_post) == expected
    assert tucker.config.shared_kv == overrides.get("shared_kv", False)
    # the attention tensors agree ...
    for a, b in zip(model.transformer.h, tucker.transformer.h):
        W, Wp = attention_tensors(a.attn)
        Wt, Wpt = attention_tensors(b.attn)
        assert rel_err(Wt, W) < 1e-12 and rel_err(Wpt, Wp) < 1e-12
    # ... and so do layer outputs and the model's logits
    idx = tokens()
    x = torch.randn(2, 16, d, dtype=torch.float64)
    rope = (tucker.rope_cos.double(), tucker.rope_sin.double()) if overrides.get("pos_emb") == "rope" else None
    y_src = model.transformer.h[0].attn(x, rope)
    y_tucker = tucker.transformer.h[0].attn(x, rope)
    assert rel_err(y_tucker, y_src) < 1e-10
    assert rel_err(tucker(idx)[0], model(idx)[0]) < 1e-10


def test_a_tucker_layer_is_exactly_tucker_at_its_own_ranks():
    """tucker_ranks_of a Tucker config: its own pre- and post-softmax ranks (given apart, not the pre twice)."""
    from tensor_forms import tucker_ranks_of
    config = GPTConfig(**TINY, attn="tucker", tucker_ranks=(3, 12, 10), tucker_ranks_post=(2, 14, 6))
    assert tucker_ranks_of(config) == ((3, 12, 10), (2, 14, 6))


def test_converted_model_is_in_eval_mode_with_the_sources_function():
    """to_tucker of a model trained with dropout: the Tucker model is returned in eval mode (no dropout), so its
    logits are the source's, deterministically."""
    model = make(dict(attn="mha"), dropout=0.3)
    tucker = to_tucker(model)
    assert not tucker.training
    idx = tokens()
    assert rel_err(tucker(idx)[0], model(idx)[0]) < 1e-10


def test_with_attention_refuses_what_does_not_fit_the_source():
    """with_attention names a config whose weights outside the attention differ from the source's, and refuses an
    attention list of another length than the model's layers (a layer would be left at its random init)."""
    from dataclasses import replace
    from tensor_forms import to_tucker_state, with_attention
    model = make(dict(attn="mha"))
    config = tucker_config_of(model.config)
    states = [to_tucker_state(b.attn, model.config) for b in model.transformer.h]
    assert rel_err(with_attention(model, config, states)(tokens())[0], model(tokens())[0]) < 1e-10
    with pytest.raises(ValueError):
        with_attention(model, config, states[:-1])
    with pytest.raises(ValueError, match="differ outside the attention"):
        with_attention(model, replace(config, mlp="swiglu"), states)


def test_gqa_with_all_heads_is_mha_and_one_head_is_mqa():
    mha = make(dict(attn="mha"))
    gqa = GPT(GPTConfig(**TINY, attn="gqa", n_kv_head=TINY["n_head"])).double().eval()
    gqa.load_state_dict(mha.state_dict())
    idx = tokens()
    assert torch.equal(gqa(idx)[0], mha(idx)[0])

    # MQA against a reference written out head by head: one K and V for every query head
    mqa = make(dict(attn="gqa", n_kv_head=1))
    attn = mqa.transformer.h[0].attn
    x = torch.randn(2, 10, TINY["n_embd"], dtype=torch.float64)
    Wq, Wk, Wv, Wo = head_factors(attn)
    assert torch.equal(Wk[0], Wk[-1]) and torch.equal(Wv[0], Wv[-1])  # one shared K/V head
    dH = attn.head_dim
    mask = torch.ones(10, 10, dtype=torch.bool).tril()
    ref = 0
    for i in range(attn.n_head):
        scores = (x @ Wq[i]) @ (x @ Wk[i]).transpose(-1, -2) / math.sqrt(dH)
        probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        ref = ref + probs @ (x @ Wv[i]) @ Wo[i]
    assert rel_err(attn(x, None), ref) < 1e-12


# ---------------------------------------------------------------------------------------
# Sinusoidal positions (pos_emb='sinusoidal': the paper's "standard cosine position embedding")


def test_sinusoidal_positions_are_a_fixed_cosine_table():
    """The table is Vaswani et al.'s (sin in even, cos in odd columns, base 10000; an odd width too), made again by
    init_weights and kept by a state_dict round trip; it takes no gradient and no optimizer state, so AdamW with
    weight decay leaves it as it was while the learned weights move; a learned table is random and trained."""
    from model import sinusoidal_table
    for dim in (32, 7):
        table = sinusoidal_table(50, dim)
        pos, i = torch.arange(50, dtype=torch.float64)[:, None], torch.arange(dim, dtype=torch.float64)[None, :]
        angle = pos * 10000.0 ** (-(i - i % 2) / dim)  # columns 2 j and 2 j + 1 share the angle of frequency j
        ref = torch.where(i % 2 == 0, angle.sin(), angle.cos())
        assert table.shape == (50, dim) and table.dtype == torch.float32 and (table - ref).abs().max() < 1e-6
    model = make(dict(attn="tucker", tucker_ranks=(3, 12, 10), pos_emb="sinusoidal"), dtype=torch.float32)
    wpe = model.transformer.wpe.weight
    table = sinusoidal_table(model.config.block_size, model.config.n_embd)
    assert torch.equal(wpe, table) and not wpe.requires_grad
    wte_before = model.transformer.wte.weight.detach().clone()
    opt = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), "cpu")
    assert all(p is not wpe for group in opt.param_groups for p in group["params"])
    idx = torch.randint(0, model.config.vocab_size, (2, model.config.block_size))
    for _ in range(2):
        _, loss = model(idx, idx)
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert wpe.grad is None and torch.equal(wpe, table)
    assert not torch.equal(model.transformer.wte.weight, wte_before)
    other = make(dict(attn="tucker", tucker_ranks=(3, 12, 10), pos_emb="sinusoidal"), dtype=torch.float32, seed=1)
    other.load_state_dict(model.state_dict())
    assert torch.equal(other.transformer.wpe.weight, table)
    model.init_weights()
    assert torch.equal(wpe, table)
    learned = make(dict(attn="tucker", tucker_ranks=(3, 12, 10)), dtype=torch.float32).transformer.wpe.weight
    assert learned.requires_grad and learned.abs().max() < 0.2  # N(0, 0.02)
    with pytest.raises(ValueError, match=r"pos_emb='cosine' is unknown: allowed \('learned', 'sinusoidal', 'rope'\)"):
        GPTConfig(pos_emb="cosine")


def test_sinusoidal_positions_under_master_weights_and_in_decoding():
    """MasterAdamW (bf16 matrices, float32 masters) leaves the fixed table float32 and unchanged, and a checkpoint of
    its model_state_dict holds it; cached decoding equals the uncached forward (float64, to its rounding)."""
    model = make(dict(attn="mha", pos_emb="sinusoidal"), dtype=torch.float32)
    opt = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), "cpu", master_weights=True)
    wpe = model.transformer.wpe.weight
    table = wpe.detach().clone()
    idx = torch.randint(0, model.config.vocab_size, (2, model.config.block_size))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as train.py steps
        _, loss = model(idx, idx)
    loss.backward()
    opt.step()
    assert wpe.dtype == torch.float32 and torch.equal(wpe, table)
    assert torch.equal(opt.model_state_dict(model)["transformer.wpe.weight"], table)
    for overrides in (dict(attn="mha"), dict(attn="tucker", tucker_ranks=(3, 12, 10), shared_kv=True)):
        model = make({**overrides, "pos_emb": "sinusoidal"}).eval()  # float64
        idx = torch.randint(0, model.config.vocab_size, (2, 10), generator=torch.Generator().manual_seed(0))
        full, _ = model(idx)
        caches = model.new_caches(2, 10)
        steps = [model(idx[:, :4], caches=caches)[0]] + [model(idx[:, t:t + 1], caches=caches)[0] for t in range(4, 10)]
        assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-10 * full.abs().max()  # as test_decode's


# ---------------------------------------------------------------------------------------
# RoPE


@pytest.mark.parametrize("name,overrides", ROPE_VARIANTS)
def test_rope_relative_position(name, overrides):
    """Shifting every position by t leaves the attention output unchanged; moving tokens apart
    (doubling every position) does change it, so the positions are really used."""
    model = make(overrides)
    attn = model.transformer.h[0].attn
    dim = ATTENTION[model.config.attn].rope_dim(model.config)
    cos, sin = rope_cache(dim, 200, model.config.rope_theta, dtype=torch.float64)
    x = torch.randn(2, 12, TINY["n_embd"], dtype=torch.float64)
    y0 = attn(x, (cos, sin))
    for t in (1, 7, 150):
        assert rel_err(attn(x, (cos[t:], sin[t:])), y0) < 1e-12
    assert rel_err(attn(x, (cos[::2], sin[::2])), y0) > 1e-4


def test_rope_tables_are_the_angles_computed_in_float64():
    """rope_cache's (cos, sin) rows are those of angle[pos, i] = pos * theta ** (-2 i / dim), (max_len, dim / 2),
    computed in float64 whatever dtype they are returned in: at position 8191 a float32 angle is off by up to
    5e-4 rad, which every rotated query and key of a long context would carry."""
    pos = torch.arange(8192, dtype=torch.float64)[:, None]
    angle = pos * 5e5 ** (-2 * torch.arange(32, dtype=torch.float64)[None, :] / 64)
    cos, sin = rope_cache(64, 8192, 5e5, dtype=torch.float64)
    assert cos.shape == sin.shape == (8192, 32) and cos.dtype == sin.dtype == torch.float64
    assert (cos - angle.cos()).abs().max() < 1e-9 and (sin - angle.sin()).abs().max() < 1e-9
    cos, sin = rope_cache(64, 8192, 5e5)  # float32 by default: the float64 values, rounded
    assert cos.dtype == sin.dtype == torch.float32
    assert (cos - angle.cos()).abs().max() < 1e-7 and (sin - angle.sin()).abs().max() < 1e-7


def test_wide_rope_is_apply_rope():
    """The decode step's form (full-width rows built once per step) rotates exactly as apply_rope: the
    same pairs (x_i, x_{i+D/2}), the same products; rotating back by -angle restores x."""
    cos, sin = rope_cache(8, 6, 10000.0, dtype=torch.float64)
    cos2, sin2 = (t[:, None] for t in wide_rope_rows(cos, sin))  # (T, 1, D)
    x = torch.randn(2, 6, 3, 8, dtype=torch.float64)
    y = apply_rope_wide(x, cos2, sin2)
    assert (y - apply_rope(x, cos[:, None], sin[:, None])).abs().max() < 1e-15
    assert (apply_rope_wide(y, cos2, wide_rope_rows(cos, -sin)[1][:, None]) - x).abs().max() < 1e-14
    assert (y - x).abs().max() > 1e-2  # positions 1.. do rotate


def test_rope_keeps_the_activations_dtype():
    """bf16 activations rotated by the float32 tables (training and prefill under autocast) stay bf16, as SDPA takes
    q, k and v in one dtype (the value is never rotated); the rotation is the float64 one to bf16 rounding."""
    cos, sin = rope_cache(8, 6, 10000.0)  # float32, as the model's buffers
    x = torch.randn(2, 6, 3, 8, dtype=torch.float64)
    y = apply_rope(x.bfloat16(), cos[:, None], sin[:, None])
    ref = apply_rope(x, cos.double()[:, None], sin.double()[:, None])
    assert y.dtype == torch.bfloat16 and (y.double() - ref).abs().max() < 0.05


# ---------------------------------------------------------------------------------------
# KV cache: prefill + one token at a time == full forward; greedy tokens agree


@pytest.mark.parametrize("name,overrides", ALL)
def test_cache_matches_full_forward(name, overrides):
    model = make(overrides)
    idx = tokens()
    full, _ = model(idx)
    caches = model.new_caches(idx.size(0))
    # prefill 7 tokens, then a chunk of 3 (queries after a cached prefix), then one at a time
    steps = [model(idx[:, :7], caches=caches)[0], model(idx[:, 7:10], caches=caches)[0]]
    steps += [model(idx[:, t:t + 1], caches=caches)[0] for t in range(10, idx.size(1))]
    assert rel_err(torch.cat(steps, dim=1), full) < 1e-12
    # the cache holds exactly the variant's values per token
    assert caches[0].values_per_token() == model.kv_values_per_token_per_layer()


@pytest.mark.parametrize("name,overrides", ALL)
def test_greedy_generation_same_with_and_without_cache(name, overrides, monkeypatch):
    """The same tokens, and the logits generate took each argmax of agree to float32 rounding (seen: <= 7e-7 of their
    largest): the tiny model's greedy text mostly repeats a token, so equal tokens alone passed a decode step with a
    30% wrong attention scale in 6 of these 16 variants (MHA, GQA, MQA, decoupled MLA)."""
    model = make(overrides, dtype=torch.float32)
    prompt = tokens(B=2, T=5, seed=3)
    seen = record_drawn_logits(monkeypatch)
    a = model.generate(prompt, 30, temperature=0.0, use_cache=True)  # runs past block_size=24
    b = model.generate(prompt, 30, temperature=0.0, use_cache=False)
    assert torch.equal(a[:, :TINY["block_size"]], b[:, :TINY["block_size"]])
    assert a.shape == (2, 35) and len(seen) == 60
    steps = TINY["block_size"] - 5  # the steps before the cache's first refill
    cached, plain = torch.stack(seen[:steps], dim=1), torch.stack(seen[30:30 + steps], dim=1)
    assert (cached - plain).abs().max() < 1e-5 * plain.abs().max()


@pytest.mark.parametrize("name,overrides", [v for v in ALL if v[1]["attn"] == "mla" and v[1].get("mla_rope") != "latent"])
def test_mla_fused_matches_unfused(name, overrides):
    model = make(overrides)
    idx = tokens()
    unfused, _ = model(idx)
    for block in model.transformer.h:
        block.attn.fused = True  # absorb W_UK into the query and W_UV into the output
    fused, _ = model(idx)
    assert rel_err(fused, unfused) < 1e-12


def test_mla_fused_exact_with_biases():
    """Absorption stays exact with biases: the key bias adds a per-query constant (softmax drops
    it) and the value bias passes through the softmax-weighted sum unchanged."""
    model = make(dict(attn="mla", q_rank=12, kv_rank=10), bias=True)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.normal_()
    idx = tokens()
    unfused, _ = model(idx)
    for block in model.transformer.h:
        block.attn.fused = True
    assert rel_err(model(idx)[0], unfused) < 1e-12


def mla_reference(attn, x, rope):
    """MLA written out head by head from per_head_weights() (the class docstring's formulas, each
    projection its own matmul): the layer's stacked matmuls must give the same output."""
    w = attn.per_head_weights()
    B, T, _ = x.shape
    add = lambda y, b: y if b is None else y + b
    heads = lambda c, W, b: add(torch.einsum("btr,hrn->bhtn", c, W), None if b is None else b[:, None, :])
    c_q = x if w["W_DQ"] is None else add(x @ w["W_DQ"], w["b_DQ"])  # (B, T, dcQ) or x
    q = heads(c_q, w["W_UQ"], w["b_UQ"])  # (B, nH, T, dH)
    k = heads(add(x @ w["W_DK"], w["b_DK"]), w["W_UK"], w["b_UK"])  # (B, nH, T, dH)
    v = heads(add(x @ w["W_DV"], w["b_DV"]), w["W_UV"], w["b_UV"])  # (B, nH, T, dH)
    scores = q @ k.transpose(-1, -2)  # (B, nH, T, T)
    if w["W_QR"] is not None:  # decoupled RoPE: per-head rotary queries, one shared rotary key
        cos, sin = rope[0][:T], rope[1][:T]
        q_r = apply_rope(heads(c_q, w["W_QR"], w["b_QR"]), cos, sin)  # (B, nH, T, dR)
        k_r = apply_rope(add(x @ w["W_KR"], w["b_KR"]), cos, sin)  # (B, T, dR)
        scores = scores + q_r @ k_r[:, None].transpose(-1, -2)
    # DeepSeek-V2's scale: the score sums dH + dR products (dR = 0 without decoupled RoPE)
    dH, dR = w["W_UQ"].size(-1), 0 if w["W_QR"] is None else w["W_QR"].size(-1)
    scores = scores / math.sqrt(dH + dR) + torch.full((T, T), float("-inf"), dtype=x.dtype).triu(1)
    o = scores.softmax(-1) @ v  # (B, nH, T, dH)
    return add(torch.einsum("bhtn,hnd->btd", o, w["W_O"]), w["b_O"])


@pytest.mark.parametrize("q_rank", [None, 12])
@pytest.mark.parametrize("shared_kv", [False, True])
@pytest.mark.parametrize("pos", ["learned", "decoupled"])
@pytest.mark.parametrize("bias", [False, True])
def test_mla_stacked_projections_match_per_head_formulas(q_rank, shared_kv, pos, bias):
    """MLA's forward runs every linear that reads x as one matmul and [W_UQ | W_QR] interleaved per head as
    another (k and v, each from its latent, by two: their gradients then need no concatenation): the same as each
    projection alone."""
    rope = dict(pos_emb="rope", rope_head_dim=4) if pos == "decoupled" else {}
    model = make(dict(attn="mla", q_rank=q_rank, kv_rank=10, shared_kv=shared_kv, **rope), bias=bias)
    attn = model.transformer.h[0].attn
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(std=0.3)  # biases too, and no structure the stacking could hide behind
    x = torch.randn(2, 16, TINY["n_embd"], dtype=torch.float64)
    tables = (model.rope_cos.double(), model.rope_sin.double()) if rope else None
    assert rel_err(attn(x, tables), mla_reference(attn, x, tables)) < 1e-12


@pytest.mark.parametrize("name,overrides", [("mha_bias", dict(attn="mha", bias=True)), ("gqa2", dict(attn="gqa", n_kv_head=2)),
                                            ("mla_shared_decoupled", ROPE_VARIANTS[3][1]),
                                            ("tucker_shared_rope", ROPE_VARIANTS[7][1])])
def test_per_head_weights_load_into_another_layer(name, overrides):
    """load_per_head_weights(per_head_weights()) makes a layer of another seed the same attention (a shared tensor's
    second name, MLA's W_DV = W_DK or Tucker's U3_post = U3, may be left out); what does not fit is a ValueError
    naming the weight: an unknown name, a missing one, a weight the layer lacks, a shape that copy_ would broadcast
    (one head's weights written into every head), and a second name of a shared tensor that differs from the first.
    A refused load writes nothing: the layer is as it was, even where only the last weight does not fit."""
    src, dst = make(overrides, seed=0).transformer.h[0].attn, make(overrides, seed=1).transformer.h[0].attn
    x = torch.randn(2, 9, TINY["n_embd"], dtype=torch.float64)
    rope = rope_cache(ATTENTION[overrides["attn"]].rope_dim(make(overrides).config), 9, 1e4, dtype=torch.float64)
    weights = {k: None if v is None else v.detach().clone() for k, v in src.per_head_weights().items()}
    shared = {"mla": "W_DV", "tucker": "U3_post"}.get(overrides["attn"])
    bad = [({**weights, "W_X": weights[next(iter(weights))]}, r"has no \['W_X'\]")]
    first = next(k for k, v in weights.items() if v is not None and v.dim() == 3)  # a per-head (or core) tensor
    bad.append(({k: v for k, v in weights.items() if k != first}, f"{first} is missing"))
    bad.append(({**weights, first: weights[first][:1]}, rf"{first}: shape \(1, "))
    last = [k for k, v in weights.items() if v is not None][-1]  # every weight before it fits
    bad.append(({**weights, last: weights[last][:1]}, rf"{last}: shape \(1,"))
    absent = next((k for k, v in weights.items() if v is None), None)
    if absent is not None:
        bad.append(({**weights, absent: torch.zeros(3)}, f"has no {absent}"))
    if overrides.get("shared_kv"):
        bad.append(({**weights, shared: weights[shared] + 1}, f"{shared} is .* the two must be equal"))
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    for wrong, says in bad:
        with pytest.raises(ValueError, match=says):
            dst.load_per_head_weights(wrong)
        assert all(torch.equal(v, before[k]) for k, v in dst.state_dict().items()), says
    if shared is not None and overrides.get("shared_kv"):
        weights.pop(shared)
    assert rel_err(dst(x, rope), src(x, rope)) > 1e-3  # another seed: another attention
    dst.load_per_head_weights(weights)
    assert rel_err(dst(x, rope), src(x, rope)) < 1e-14


# ---------------------------------------------------------------------------------------
# Causality, gradients


@pytest.mark.parametrize("name,overrides", ALL)
def test_causality(name, overrides):
    model = make(overrides)
    idx = tokens()
    changed = idx.clone()
    changed[:, 15] = (changed[:, 15] + 1) % TINY["vocab_size"]
    a, b = model(idx)[0], model(changed)[0]
    assert torch.allclose(a[:, :15], b[:, :15], rtol=0, atol=1e-12)
    assert not torch.allclose(a[:, 15:], b[:, 15:])


@pytest.mark.parametrize("name,overrides", ALL)
def test_forward_backward_finite(name, overrides):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**TINY, **overrides, "dropout": 0.1}))
    idx = tokens()
    _, loss = model(idx, targets=tokens(seed=9))
    assert torch.isfinite(loss) and abs(loss.item() - math.log(TINY["vocab_size"])) < 1.0
    loss.backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
        assert p.grad.abs().sum() > 0, f"no gradient reaches {n}"


@pytest.mark.parametrize("name,overrides", [VARIANTS[1], VARIANTS[3], VARIANTS[6]])
def test_dropout_only_in_training(name, overrides):
    """dropout > 0 drops attention probabilities and activations in training mode only: in eval mode the model is
    the function of the same weights with dropout=0 (what evaluating or sampling a model trained with dropout
    relies on), while two training-mode calls differ."""
    model, plain = make(overrides, dropout=0.3), make(overrides)  # one seed: the same weights
    idx = tokens()
    assert torch.equal(model(idx)[0], plain(idx)[0])
    model.train()
    assert not torch.equal(model(idx)[0], model(idx)[0])


# ---------------------------------------------------------------------------------------
# Accounting vs the paper's Table 1 (its formulas written out in table1 below), on GPT-2 124M shapes


def table1(attn, d=768, nH=12, dH=64, nG=None, dcQ=None, dcK=None, shared=False, ranks=None, ranks_post=None):
    """(attention params per layer, KV values per token per layer) from the paper's formulas."""
    if attn == "mha":
        return 4 * d * d, 2 * d
    if attn == "gqa":
        return 2 * d * d + 2 * nG * dH * d, 2 * nG * dH
    if attn == "mla":
        if dcQ is None:
            return 2 * d * d + 4 * d * dcK, 2 * dcK
        return d * d + 2 * d * dcQ + (3 if shared else 4) * d * dcK, (1 if shared else 2) * dcK
    (r1, r2, r3), (p1, p2, p3) = ranks, ranks_post or ranks
    pre, post = nH * r1 + d * r2 + d * r3 + r1 * r2 * r3, nH * p1 + d * p2 + d * p3 + p1 * p2 * p3
    return (pre + post - d * p3, r3) if shared else (pre + post, r3 + p3)


COUNT_CASES = [
    (dict(attn="mha"), dict(attn="mha")),
    (dict(attn="gqa", n_kv_head=4), dict(attn="gqa", nG=4)),
    (dict(attn="gqa", n_kv_head=1), dict(attn="gqa", nG=1)),
    (dict(attn="mla", q_rank=128, kv_rank=128), dict(attn="mla", dcQ=128, dcK=128)),
    (dict(attn="mla", q_rank=64, kv_rank=32, shared_kv=True), dict(attn="mla", dcQ=64, dcK=32, shared=True)),
    (dict(attn="mla", kv_rank=128), dict(attn="mla", dcK=128)),
    (dict(attn="mla", q_rank=128, kv_rank=128, shared_kv=True, pos_emb="rope", mla_rope="latent"),
     dict(attn="mla", dcQ=128, dcK=128, shared=True)),
    (dict(attn="tucker", tucker_ranks=(8, 64, 64)), dict(attn="tucker", ranks=(8, 64, 64))),
    (dict(attn="tucker", tucker_ranks=(8, 128, 64), pos_emb="rope"), dict(attn="tucker", ranks=(8, 128, 64))),
    (dict(attn="tucker", tucker_ranks=(4, 32, 32), shared_kv=True), dict(attn="tucker", ranks=(4, 32, 32), shared=True)),
    (dict(attn="tucker", tucker_ranks=(8, 64, 64), tucker_ranks_post=(6, 32, 48)),
     dict(attn="tucker", ranks=(8, 64, 64), ranks_post=(6, 32, 48))),
]


@pytest.mark.parametrize("overrides,formula", COUNT_CASES)
def test_counts_equal_table1(overrides, formula):
    with torch.device("meta"):
        model = GPT(GPTConfig(bias=False, **overrides))
    params, kv = table1(**formula)
    assert model.attn_params_per_layer() == params
    assert model.attn_params() == 12 * params
    assert model.kv_values_per_token_per_layer() == kv
    assert model.kv_cache_bytes(seq_len=256) == 12 * kv * 256 * 2


def test_gpt2_124m_counts():
    with torch.device("meta"):
        model = GPT(GPTConfig(bias=False))
    assert model.attn_params_per_layer() == 4 * 768 ** 2
    assert round(model.attn_params() * 2 / 1e6, 2) == 56.62  # the paper's MB (bf16, 12 layers)
    assert model.kv_cache_bytes(256) / 2 ** 20 == 9.0  # the Shakespeare table's 9.000 MiB
    assert 123e6 < model.get_num_params() < 125e6  # GPT-2 "124M" with learned positions, no biases


def test_decoupled_rope_counts():
    """Decoupled RoPE adds W_QR (dcQ x nH dR) and W_KR (d x dR) and caches the dR-dim rotary key."""
    with torch.device("meta"):
        model = GPT(GPTConfig(bias=False, attn="mla", q_rank=128, kv_rank=128, pos_emb="rope"))
    dR = 32  # default: dH / 2 as in DeepSeek-V2
    assert model.config.rope_head_dim == dR
    assert model.attn_params_per_layer() == table1("mla", dcQ=128, dcK=128)[0] + 128 * 12 * dR + 768 * dR
    assert model.kv_values_per_token_per_layer() == 2 * 128 + dR


@pytest.mark.parametrize("name,overrides", ALL + [  # and MLA with the full d x d query (q_rank=None)
    ("mla_full_q", dict(attn="mla", q_rank=None, kv_rank=10)),
    ("mla_full_q_decoupled", dict(attn="mla", q_rank=None, kv_rank=10, pos_emb="rope", rope_head_dim=4))])
def test_flops_per_token_match_torch_flop_counter(name, overrides):
    """Each attention's forward FLOP count equals what torch's FLOP counter sees for a sequence
    of ctx tokens (attention scores over the full ctx, as nanoGPT counts)."""
    model = make(overrides, dtype=torch.float32)
    attn, T = model.transformer.h[0].attn, TINY["block_size"]
    x = torch.randn(1, T, TINY["n_embd"])
    rope = (model.rope_cos, model.rope_sin) if model.config.pos_emb == "rope" else None
    # the math backend spells attention out as matmuls, which the counter sees
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        attn(x, rope)
    counted = counter.get_total_flops()
    head_core_flops = 0
    if model.config.attn == "tucker":  # G = C x1 U1 and G~ = C~ x1 U~1: once per step, not per token
        (r1, r2, r3), (p1, p2, p3) = attn.ranks, attn.ranks_post
        head_core_flops = 2 * attn.n_head * (r1 * r2 * r3 + p1 * p2 * p3)
    assert attn.flops_per_token(T) * T == counted - head_core_flops


def test_mfu_flops_equal_nanogpt_formula_for_mha():
    """For MHA the count reduces to nanoGPT's 6 N + 12 L H Q T (N: matmul weights incl. lm_head)."""
    with torch.device("meta"):
        model = GPT(GPTConfig(bias=False))
    cfg = model.config
    n_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    T = cfg.block_size
    assert model.flops_per_token() == 6 * n_matmul + 12 * cfg.n_layer * cfg.n_head * cfg.head_dim * T
    assert 0 < model.estimate_mfu(tokens_per_iter=12 * 1024, dt=0.026, peak_flops=790e12) < 1
    # a context other than block_size (bench_train's shorter sequences): the score term follows ctx, and so does MFU
    short = 6 * n_matmul + 12 * cfg.n_layer * cfg.n_head * cfg.head_dim * 256
    assert model.flops_per_token(256) == short
    assert model.estimate_mfu(tokens_per_iter=64 * 256, dt=0.01, peak_flops=790e12, ctx=256) == \
        pytest.approx(short * 64 * 256 / 0.01 / 790e12)


# ---------------------------------------------------------------------------------------
# Initialization: effective per-head maps at MHA's scale


@pytest.mark.parametrize("overrides", [
    dict(attn="gqa", n_kv_head=2),
    dict(attn="mla", q_rank=128, kv_rank=128),
    dict(attn="mla", kv_rank=64, shared_kv=True),
    dict(attn="tucker", tucker_ranks=(8, 64, 64)),
    dict(attn="tucker", tucker_ranks=(4, 128, 32), shared_kv=True),
])
def test_init_scales(overrides):
    """std of W_i = W_Q,i W_K,i^T and W~_i = (W_V,i W_O,i)^T entries equals MHA's at GPT-2 init:
    sqrt(dH) s^2 and sqrt(dH) s s_o (s = 0.02, s_o = s / sqrt(2 L)), within sampling noise.
    GQA/MLA: one draw is within 1.3% of the target (seeds 0-31), so rel=0.02 rejects a 10% scale error.
    Tucker: one draw is not enough. W's spread follows the few entries of U1 (nH x r1 = 48 to 96 of them), so
    W.std() misses the target by -21% to +30% over seeds. The test therefore divides this draw's U1 fluctuation
    out (W.var() / mean(U1^2) varies by 2% between seeds) and multiplies by mean(U1^2) averaged over 256
    re-inits: an estimate of E[W^2] over the init, within 2.4% of the target in std for each of 12 seed sets.
    rel=0.05 then rejects a 10% scale error in any factor, U1's included."""
    torch.manual_seed(0)
    config = GPTConfig(bias=False, **overrides)
    attn = ATTENTION[config.attn](config)
    s, s_o = 0.02, 0.02 / math.sqrt(2 * config.n_layer)
    attn.init_weights(s, s_o)
    with torch.no_grad():
        W, W_post = attention_tensors(attn)
    dH = config.head_dim
    var, var_post, rel = W.var().item(), W_post.var().item(), 0.02
    if config.attn == "tucker":
        def u1_sq():
            w = attn.per_head_weights()
            return w["U1"].pow(2).mean().item(), w["U1_post"].pow(2).mean().item()
        drawn = u1_sq()
        draws = []
        for seed in range(1, 257):
            torch.manual_seed(seed)
            attn.init_weights(s, s_o)
            draws.append(u1_sq())
        mean = [sum(d[k] for d in draws) / len(draws) for k in (0, 1)]
        var, var_post, rel = var * mean[0] / drawn[0], var_post * mean[1] / drawn[1], 0.05
    assert math.sqrt(var) == pytest.approx(math.sqrt(dH) * s * s, rel=rel)
    assert math.sqrt(var_post) == pytest.approx(math.sqrt(dH) * s * s_o, rel=rel)
    if config.attn == "tucker":  # the cached key keeps MHA's key spread: std(x U3) = sqrt(d) s
        x = torch.randn(256, config.n_embd)
        assert (x @ attn.U3).std().item() == pytest.approx(math.sqrt(config.n_embd) * s, rel=0.1)


@pytest.mark.parametrize("q_rank", [128, None])
def test_init_scales_of_decoupled_rope(q_rank):
    """MLA's decoupled RoPE: the rotary per-head map W^R_i = W_DQ W_QR,i W_KR^T (W_QR,i W_KR^T with the full query)
    starts with entries of std sqrt(dR) s^2, MHA's per-head query-key statistics over dR dims, so that the rotary
    scores start at the scale of the others (one draw is within 1% of it over seeds 0-15; rel=0.02)."""
    torch.manual_seed(0)
    config = GPTConfig(bias=False, attn="mla", q_rank=q_rank, kv_rank=128, pos_emb="rope")
    attn = ATTENTION["mla"](config)
    s = 0.02
    attn.init_weights(s, s / math.sqrt(2 * config.n_layer))
    dR = config.rope_head_dim
    with torch.no_grad():
        W_QR = attn.q_rope.weight.t() if attn.q_down is None else attn.q_down.weight.t() @ attn.q_rope.weight.t()
        W = torch.stack([W_QR[:, i * dR:(i + 1) * dR] @ attn.k_rope.weight for i in range(config.n_head)])
    assert W.std().item() == pytest.approx(math.sqrt(dR) * s * s, rel=0.02)


@pytest.mark.parametrize("name,overrides", VARIANTS)
def test_init_zeroes_every_bias(name, overrides):
    """GPT-2's init with bias=True: every bias (each Linear's, Tucker's output bias, the LayerNorms') starts at zero
    and every norm weight at one."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**TINY, **overrides, "bias": True}))
    biases = {name: p for name, p in model.named_parameters() if name.endswith("bias")}
    assert len(biases) > 4 * TINY["n_layer"] and all(not p.any() for p in biases.values()), \
        [name for name, p in biases.items() if p.any()]
    assert all(p.eq(1).all() for name, p in model.named_parameters() if name.endswith(("ln_1.weight", "ln_2.weight")))


# ---------------------------------------------------------------------------------------
# Invalid configurations: ValueError naming the key, at construction


@pytest.mark.parametrize("name, overrides", ALL + [("mha_sinusoidal", dict(attn="mha", pos_emb="sinusoidal"))],
                         ids=[n for n, _ in ALL] + ["mha_sinusoidal"])
def test_meta_model_after_to_empty_and_init_weights_is_the_cpu_model(name, overrides, monkeypatch):
    """A model built on the meta device is not initialized (shapes only: the tables count 46 of them); to_empty()
    then init_weights() under a seed gives every parameter and buffer (RoPE's tables, the sinusoidal one) of a CPU
    model whose init_weights() ran under that seed, so its logits are that model's."""
    cfg = GPTConfig(**{**TINY, **overrides})
    calls = []
    real = GPT.init_weights
    monkeypatch.setattr(GPT, "init_weights", lambda self: (calls.append(self.lm_head.weight.device.type), real(self)))
    with torch.device("meta"):
        meta = GPT(cfg)
    cpu = GPT(cfg)
    assert calls == ["cpu"]  # the meta model's constructor skipped it
    meta.to_empty(device="cpu")
    for model in (meta, cpu):
        torch.manual_seed(7)
        model.init_weights()
    a, b = dict(meta.named_buffers()), dict(cpu.named_buffers())
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    if cfg.pos_emb == "rope":
        assert {"rope_cos", "rope_sin"} <= a.keys()
    a, b = meta.state_dict(), cpu.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    x = tokens()
    assert torch.equal(meta.eval()(x, x)[1], cpu.eval()(x, x)[1])


def test_inert_keys_are_the_keys_this_model_never_reads():
    """GPTConfig.inert_keys() names the keys with a default of their own that the configured model never reads (train.py
    refuses them on its command line): MLA's RoPE keys without RoPE (mla_rope_kernels under latent RoPE too),
    rope_theta without RoPE, gelu under SwiGLU, mlp_multiple_of unless SwiGLU's width is its default; never a key read."""
    rope_keys = {"mla_rope", "mla_rope_kernels", "rope_theta"}
    for kw, inert in [(dict(), rope_keys | {"mlp_multiple_of"}),
                      (dict(attn="mla", kv_rank=16), rope_keys | {"mlp_multiple_of"}),  # MLA without RoPE
                      (dict(attn="mla", kv_rank=16, pos_emb="rope"), {"mlp_multiple_of"}),
                      (dict(attn="mla", kv_rank=16, pos_emb="rope", mla_rope="latent"), {"mla_rope_kernels", "mlp_multiple_of"}),
                      (dict(attn="tucker", tucker_ranks=(2, 8, 8), pos_emb="rope", mlp="swiglu"),
                       {"mla_rope", "mla_rope_kernels", "gelu"}),
                      (dict(mlp="swiglu", mlp_hidden=64), rope_keys | {"gelu", "mlp_multiple_of"})]:
        config = GPTConfig(**kw)
        assert set(config.inert_keys()) == inert, kw
        assert all(f"reads it" in why for why in config.inert_keys().values())


@pytest.mark.parametrize("overrides,key", [
    (dict(attn="flash"), r"attn='flash' is unknown: allowed \('mha', 'gqa', 'mla', 'tucker'\)"),
    (dict(pos_emb="alibi"), "pos_emb"),
    (dict(attn="mla", kv_rank=32, pos_emb="rope", mla_rope="sideways"),
     r"mla_rope='sideways' is unknown: allowed \('decoupled', 'latent'\)"),
    (dict(attn="gqa", n_kv_head=5), "n_kv_head"),
    (dict(attn="gqa", n_kv_head=0), "n_kv_head"),
    (dict(attn="gqa", n_kv_head=24), r"n_kv_head=24 is out of range: allowed 1\.\.12"),  # the range it allows
    (dict(attn="gqa"), r"attn='gqa' needs n_kv_head \(1 = MQA\)"),
    (dict(attn="gqa", n_kv_head=True), "n_kv_head must be an integer"),  # a bool is no count
    (dict(attn="mha", n_kv_head=4), "n_kv_head"),
    (dict(attn="tucker", tucker_ranks=(13, 64, 64)), r"tucker_ranks[0] \(mode 1\)=13 is out of range: allowed 1\.\.12"),
    (dict(attn="tucker", tucker_ranks=(8, 769, 64)), "tucker_ranks"),
    (dict(attn="tucker", tucker_ranks=(8, 64, 0)), "tucker_ranks"),
    (dict(attn="tucker", tucker_ranks=(8, -1, 64)), "tucker_ranks"),
    (dict(attn="tucker", tucker_ranks=(8, 64)), "tucker_ranks"),
    (dict(attn="tucker", tucker_ranks=(8, 64, 64, 2)), "tucker_ranks must be three integers"),  # not the first three
    (dict(attn="tucker", tucker_ranks=8), "tucker_ranks must be three integers"),
    (dict(attn="tucker", tucker_ranks=(8, 64, 64), tucker_ranks_post=(13, 64, 64)), "tucker_ranks_post"),
    (dict(attn="tucker", tucker_ranks=(8, 64, 64), tucker_ranks_post=(8, 64, 32), shared_kv=True), "tucker_ranks_post"),
    (dict(attn="tucker", tucker_ranks=(8, 64, 63), pos_emb="rope"), "tucker_ranks"),
    (dict(attn="tucker"), "tucker_ranks"),
    (dict(attn="mla"), "kv_rank"),
    (dict(attn="mla", kv_rank=0), "kv_rank"),
    (dict(attn="mla", kv_rank=1000), "kv_rank"),
    (dict(attn="mla", kv_rank=64, q_rank=-3), "q_rank"),
    (dict(attn="mla", kv_rank=64, q_rank=769), r"q_rank=769 is out of range: allowed 1\.\.768"),  # a rank above d
    (dict(attn="mla", kv_rank=63, pos_emb="rope", mla_rope="latent"), "kv_rank"),
    (dict(attn="mla", kv_rank=64, pos_emb="rope", rope_head_dim=7), "rope_head_dim"),
    (dict(attn="mla", kv_rank=64, pos_emb="rope", rope_head_dim=0), "rope_head_dim=0 is out of range"),
    (dict(attn="mla", kv_rank=64, pos_emb="rope", mla_rope="latent", rope_head_dim=8), "rope_head_dim"),
    (dict(attn="mla", kv_rank=64, rope_head_dim=8), "rope_head_dim"),
    (dict(attn="tucker", tucker_ranks=(8, 64, 64), kv_rank=64), "kv_rank"),
    (dict(attn="tucker", tucker_ranks=(8, 64, 64), q_rank=64), "q_rank"),
    (dict(attn="mla", kv_rank=32, tucker_ranks=(8, 64, 64)),  # how to clear a key a config file set
     r"tucker_ranks=\(8, 64, 64\) is a key of attn in \('tucker',\), but attn='mla': remove it \(set by a config "
     r"file: --tucker_ranks=None\)"),
    (dict(attn="mha", shared_kv=True), "shared_kv"),
    (dict(n_embd=770), "n_embd"),
    (dict(n_head=2, n_embd=6, pos_emb="rope"), "head dim"),
    (dict(attn="gqa", n_kv_head=1, n_head=2, n_embd=6, pos_emb="rope"), "head dim"),
    (dict(n_layer=0), "n_layer"),
    (dict(dropout=1.5), "dropout"),
    (dict(dropout=1.0), r"dropout=1\.0 is out of range: allowed a number in [0, 1\)"),  # every activation dropped
    (dict(dropout="0.1"), "dropout"),
    (dict(dropout=False), "dropout"),  # a bool is no probability
    (dict(rope_theta=-1.0), "rope_theta"),
    (dict(rope_theta=0), "rope_theta=0 must be a positive finite number"),  # (before block_size / rope_theta is taken)
    (dict(rope_theta=True), "rope_theta"),
    (dict(rope_theta=float("inf")), "rope_theta"),
    (dict(bias="no"), "bias"),
    (dict(attn="mla", kv_rank=32, shared_kv="False"), "shared_kv"),
    (dict(attn="mha", n_kv_head=4.0), "n_kv_head"),
    # rope_head_dim's default, half the head dim, must be even and >= 2 too: dH 6 -> 3, dH 1 -> 0
    (dict(attn="mla", kv_rank=16, pos_emb="rope", n_embd=48, n_head=8), "rope_head_dim=None defaults to .* = 3"),
    (dict(attn="mla", kv_rank=8, pos_emb="rope", n_embd=16, n_head=16), "rope_head_dim=None defaults to .* = 0"),
])
def test_invalid_config_raises_value_error(overrides, key):
    with pytest.raises(ValueError, match=key.replace("[", r"\[")):
        GPTConfig(**overrides)


def test_every_valid_config_survives_its_checkpoint_dict():
    """A config accepted at construction loads back from its to_dict() (what a checkpoint stores), defaults filled
    in __post_init__ included (MLA's decoupled rope_head_dim)."""
    for kw in (dict(attn="mla", kv_rank=16, pos_emb="rope", n_embd=64, n_head=4),
               dict(attn="mla", kv_rank=16, pos_emb="rope", n_embd=48, n_head=8, rope_head_dim=2),
               dict(attn="mla", kv_rank=16, pos_emb="rope", mla_rope="latent", n_embd=64, n_head=4),  # no rotary dims
               dict(attn="mha", n_kv_head=4, n_embd=64, n_head=4),  # MHA may name its key/value heads: all of them
               dict(attn="tucker", tucker_ranks=(2, 8, 8), pos_emb="rope", n_embd=32, n_head=4)):
        config = GPTConfig(**kw)
        assert GPTConfig.from_dict(config.to_dict()) == config


def test_targets_outside_the_vocabulary_make_the_loss_nan():
    """-1 is the ignore index; any other target outside 0 .. V-1 (e.g. -100, another library's ignore index, or V)
    makes the loss nan, as the fused head's does (no row silently scored as class 0); last_only with targets is an
    error (it returns no loss)."""
    import torch.nn.functional as F
    from model import LogitsCrossEntropy
    logits = torch.randn(5, 7, requires_grad=True)
    targets = torch.tensor([1, -1, 3, 6, 0])
    ours = LogitsCrossEntropy.apply(logits, targets)
    assert torch.allclose(ours, F.cross_entropy(logits, targets, ignore_index=-1))
    for bad in (-100, -2, 7):
        assert LogitsCrossEntropy.apply(logits, torch.tensor([1, bad, 3, 6, 0])).isnan()
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32))
    idx = torch.randint(0, 32, (2, 8))
    with pytest.raises(ValueError, match=r"last_only=True\) returns .* no loss: drop targets"):
        model(idx, targets=idx, last_only=True)


def test_forward_names_a_bad_idx_targets_or_caches():
    """forward checks what it is given (shapes, dtypes, the caches' batch) with a ValueError naming it, before any
    layer: a float, 1-D or 3-D idx, targets of another shape or a float dtype, caches built for another batch (before:
    IndexError / RuntimeError from inside the embedding, the position add, the loss or the cache write). int32 ids
    stay accepted, as the embedding takes them."""
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32))
    idx = torch.randint(0, 32, (2, 8))
    for bad in (idx.float(), idx.to(torch.uint8), idx[0], idx[None]):
        with pytest.raises(ValueError, match=r"idx of shape .* allowed \(B, T\) token ids"):
            model(bad)
    for bad in (idx[:, :4], idx.reshape(-1), idx.float()):
        with pytest.raises(ValueError, match=r"targets of shape .* allowed idx's shape \(2, 8\)"):
            model(idx, bad)
    with pytest.raises(ValueError, match=r"caches of 1 layers for 3 sequences, idx of 2: allowed model.new_caches\(2\)"):
        model(idx, caches=model.new_caches(3))
    assert model(idx.int(), idx.int())[1].isfinite()


def test_generate_at_block_size_1():
    """The smallest context: each cached step refills the cache from the last token, as the uncached path crops."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=1, vocab_size=32)).eval()
    idx = torch.tensor([[3]])
    cached = model.generate(idx, 4, temperature=0, decode="eager")
    assert torch.equal(cached, model.generate(idx, 4, temperature=0, use_cache=False))


def test_activation_checkpointing_leaves_caches_to_the_blocks():
    """A forward with caches in train mode is never checkpointed (a checkpointed block gets no cache): the cache is
    written, and the cached continuation equals the full forward."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=12, vocab_size=32,
                          activation_checkpointing=True)).double()
    idx = torch.randint(0, 32, (2, 10))
    full, _ = model(idx)
    caches = model.new_caches(2, dtype=torch.float64)
    first, _ = model(idx[:, :6], caches=caches)
    rest, _ = model(idx[:, 6:], caches=caches)
    assert caches[0].pos == 10
    assert torch.allclose(torch.cat([first, rest], dim=1), full, atol=1e-12)


def test_config_roundtrip_through_dict():
    config = GPTConfig(attn="tucker", tucker_ranks=[8, 64, 64], shared_kv=True, pos_emb="rope")
    assert config.tucker_ranks == (8, 64, 64) and config.tucker_ranks_post == (8, 64, 64)
    assert GPTConfig.from_dict(config.to_dict()) == config
    assert tucker_config_of(GPTConfig(attn="gqa", n_kv_head=3)).tucker_ranks == (12, 768, 192)


def test_cache_overflow_is_a_clear_error():
    cache = LayerCache({"k": (1, 4)}, batch_size=1, max_len=3)
    cache.append(k=torch.zeros(1, 1, 3, 4))
    with pytest.raises(ValueError, match="full"):
        cache.append(k=torch.zeros(1, 1, 1, 4))


def test_cache_write_at_stores_one_token_in_place_in_the_caches_dtype():
    """LayerCache.write_at (the static decode step's write): the token's entries land at the position the (1,) tensor
    holds, cast to the cache's dtype (bf16 here, float32 values), in the tensors the cache already has (a captured
    graph replays those addresses); nothing else is written and the host-side pos stays where it was."""
    cache = LayerCache({"k": (2, 4), "v": (2, 3)}, batch_size=1, max_len=5, dtype=torch.bfloat16)
    stores = dict(cache.store)
    k, v = torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 3)
    cache.write_at(torch.tensor([3]), k=k, v=v)
    assert all(cache.store[name] is stores[name] for name in stores) and cache.pos == 0
    for name, value in (("k", k), ("v", v)):
        buf = cache.store[name]
        assert buf.dtype == torch.bfloat16 and torch.equal(buf[:, :, 3:4], value.bfloat16())
        assert not buf[:, :, [0, 1, 2, 4]].any()


def test_new_caches_hold_max_len_positions_in_the_dtype_asked_for():
    """new_caches: one LayerCache per layer of max_len positions (block_size when not given) of what the variant caches
    per token, in the dtype asked for (the model's when not given): a cache of 5 takes 5 tokens, not a 6th."""
    model = make(dict(attn="gqa", n_kv_head=2), dtype=torch.float32)
    caches = model.new_caches(3, 5, dtype=torch.bfloat16)
    assert len(caches) == TINY["n_layer"]
    for cache in caches:
        assert cache.max_len == 5 and cache.values_per_token() == model.kv_values_per_token_per_layer()
        assert all(buf.shape == (3, 2, 5, 8) and buf.dtype == torch.bfloat16 for buf in cache.store.values())
    kv = dict(k=torch.zeros(3, 2, 5, 8, dtype=torch.bfloat16), v=torch.zeros(3, 2, 5, 8, dtype=torch.bfloat16))
    caches[0].append(**kv)
    with pytest.raises(ValueError, match="full"):
        caches[0].append(k=torch.zeros(3, 2, 1, 8), v=torch.zeros(3, 2, 1, 8))
    default = model.new_caches(1)
    assert default[0].max_len == TINY["block_size"] and default[0].store["k"].dtype == torch.float32


@pytest.mark.parametrize("loss_head", ["fused", "logits"])
def test_targets_that_are_a_strided_view_give_the_same_loss(loss_head):
    """Targets sliced from one tensor (y[:, 1:], not contiguous) are taken as they are: the loss equals that of a
    contiguous copy (a view(-1) of them raised a stride error inside forward)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=64, bias=False,
                          loss_head=loss_head))
    y = torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(1))
    x, t = y[:, :-1], y[:, 1:]
    assert not t.is_contiguous()
    assert torch.equal(model(x, t)[1], model(x, t.contiguous())[1])

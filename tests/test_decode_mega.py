"""decode_mega: the whole decode step in one persistent kernel (grid barriers between its phases).

Properties: for MHA, GQA, MQA, Tucker and MLA (the last two with shared KV too; LayerNorm, no biases), and with RoPE
(MHA, GQA, Tucker: q and the new key rotated in the kernel; Tucker's shared latent and MLA's latent RoPE: the keys
rotated as read), the step kernel's logits and the cache rows it writes equal GPT.decode_step's (the model's own
decode path) over several consecutive steps, with the cache split over several programs and merged; at 3 sequences
for GQA and shared-latent Tucker (RMSNorm, biases, tiles small enough that each program takes several a phase); a
weight change reaches the next step (the stacked copy is rebuilt); StaticDecoder(mega=True) decodes what the eager
step decodes. Unsupported models (MLA's decoupled RoPE, SwiGLU, head dims that are not powers of two, too many rows)
are refused with the reason. CPU: the kernel through Triton's interpreter (each phase a launch: a barrier would wait
forever there), float32, to float32 rounding. CUDA (skipped without a GPU): the one-launch step with its barriers,
bf16, against the phase-by-phase launches and against the model.
"""
import pytest
import torch

import decode_mega as dm
from interpreted import needs_child
from model import GPT, GPTConfig, StaticDecoder

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")

VARIANTS = {
    "mha": dict(attn="mha"),
    "gqa": dict(attn="gqa", n_kv_head=2),
    "mqa": dict(attn="gqa", n_kv_head=1),
    "tucker": dict(attn="tucker", tucker_ranks=(2, 16, 16)),
    "tucker_shared": dict(attn="tucker", tucker_ranks=(2, 16, 16), shared_kv=True),
    "mla": dict(attn="mla", q_rank=16, kv_rank=16),  # absorbed and merged: one latent K/V head of 16
    "mla_shared": dict(attn="mla", q_rank=16, kv_rank=16, shared_kv=True),
    "mha_rope": dict(attn="mha", pos_emb="rope"),  # q and the new key rotated in phase A, keys cached rotated
    "gqa_rope": dict(attn="gqa", n_kv_head=2, pos_emb="rope"),
    "tucker_rope": dict(attn="tucker", tucker_ranks=(2, 16, 16), pos_emb="rope"),  # latent RoPE, separate K and V
    # keys cached unrotated, rotated as B1 reads them: a shared latent (also the value), MLA's latent RoPE; 32 wide
    # (B1 turns them in halves, each a tensor-core product's K: 16 at least on a GPU)
    "tucker_shared_rope": dict(attn="tucker", tucker_ranks=(2, 16, 32), shared_kv=True, pos_emb="rope"),
    "mla_latent": dict(attn="mla", q_rank=16, kv_rank=32, pos_emb="rope", mla_rope="latent"),
}


def tiny(variant, bias=False, norm="layernorm", dtype=torch.float32, device="cpu", **over):
    cfg = dict(n_layer=2, n_head=4, n_embd=64, block_size=96, vocab_size=101, bias=bias, norm=norm, dropout=0.0)
    cfg.update(VARIANTS[variant])
    cfg.update(over)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**cfg)).eval()
    with torch.no_grad():  # non-trivial norms and biases (zeros and ones would hide a wrong index)
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model.to(device=device, dtype=dtype)


def decode_both(model, batch, context, steps, programs, device="cpu"):
    """Logits and caches of `steps` decode steps after a random `context`-row cache, by the model's step and by
    the kernel, from the same start."""
    gen = torch.Generator().manual_seed(1)
    ref_caches = model.new_caches(batch, context + steps + 1, device=device)
    for c in ref_caches:
        for buf in c.store.values():
            buf.copy_(torch.randn(buf.shape, generator=gen))
    caches = model.new_caches(batch, context + steps + 1, device=device)
    for c, r in zip(caches, ref_caches):
        for name in c.store:
            c.store[name].copy_(r.store[name])
    mega = dm.step_decoder(model, caches, programs=programs)
    tokens = torch.randint(model.config.vocab_size, (steps, batch, 1), generator=gen).to(device)
    got, want = [], []
    with torch.no_grad():
        for i in range(steps):
            pos = torch.tensor([context + i], device=device)
            want.append(model.decode_step(tokens[i], ref_caches, pos).float().clone())
            got.append(mega.decode_step(tokens[i], caches, pos).float().clone())
    return got, want, caches, ref_caches, mega


def assert_matches_the_model(got, want, caches, ref, mega, rows):
    """decode_both's results: every step's logits equal the model's to float32 rounding, and so do the caches'
    first `rows` rows (the context and every row the steps wrote); no barrier gave up."""
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    for c, r in zip(caches, ref):
        for name in c.store:
            torch.testing.assert_close(c.store[name][:, :, :rows], r.store[name][:, :, :rows], rtol=1e-5, atol=1e-5)
    assert not mega.error.item()


UNFUSED = dict(FUSED_MLP=False)  # the MLP as two phases, F over the whole hidden row
AHEAD = dict(MLP_PROJ_AHEAD=True)  # the fused MLP's W_proj^T tile loaded before its h (the next tile's too)
BEHIND = dict(MLP_PROJ_AHEAD=False)  # ... after its GELU (the default, None, decides by phase A's tile)
LATE = dict(VEC_AHEAD=False)  # the norms' weights and biases and the biases loaded where used, not in the barriers
ROWS_3D = dict(PRODUCT_2D=False)  # the GEMV products as one 3D product (not a row at a time in the weights' layout)
COPIES = dict(MLP_COPIES=1)  # the fused MLP's sums in one copy (the default spreads them over 4)


# the interpreter's batch-1 cases (CI time: ~3.5 s each): every variant but those whose path another covers (GQA with
# RoPE: MHA's and Tucker's rotation; MLA with learned positions: MLA's latent RoPE at batch 1, both at 5-6 in
# tests/test_decode_wide.py); the CUDA cases below take every variant
INTERP_VARIANTS = [v for v in VARIANTS if v not in ("gqa_rope", "mla", "mla_shared", "tucker_shared_rope")]


@needs_child
@pytest.mark.parametrize("variant, batch, knobs", [(v, 1, {}) for v in INTERP_VARIANTS] + [
    ("gqa", 3, {}), ("tucker_shared", 3, {}), ("tucker", 1, UNFUSED), ("tucker", 1, BEHIND),
    ("mqa", 1, dict(MLP_UNITS=4)), ("tucker", 2, {}), ("mha", 2, LATE), ("gqa", 2, ROWS_3D),
    ("tucker_shared", 2, COPIES), ("gqa", 2, dict(MLP_COPIES=3)), ("mqa", 1, dict(MLP_UNITS=4, **BEHIND)),
    ("tucker_shared_rope", 1, dict(BLOCK_N=32, MIN_CHUNK=32))],
    ids=lambda p: ("-".join(f"{k}={v}" for k, v in p.items()) or "defaults") if isinstance(p, dict) else None)
def test_interp_step_kernel_matches_the_model(variant, batch, knobs, monkeypatch):
    """Two steps from a 40-row cache: logits and the written cache rows equal the model's, the
    cache split in several (16-row chunks over 8 programs) and merged; at batch 3 with tiles small enough that each
    program takes several a phase (GQA's several KV heads, Tucker's shared latent); the MLP fused (the default) and not, its
    W_proj^T tiles loaded at the phase's start (these small models' choice: MLP_PROJ_AHEAD=None) and after each
    tile's h, and in tiles of 4 hidden units (several a program, W_proj^T's either way); its sums in 4 copies (the
    default), 3 and 1; the norms' weights and biases loaded in the barriers (the default) and where used; the
    products a row at a time (the default) and as one 3D product; LayerNorm without biases (batch 1), with them
    (batch 2), RMSNorm with biases (batch 3); keys rotated as read (a shared latent with RoPE) at 16 rows a step in
    32-row chunks: a split's second step turned by the queries' base at its own first row."""
    monkeypatch.setattr(dm, "BLOCK_N", 16)
    monkeypatch.setattr(dm, "MIN_CHUNK", 16)
    for name, value in knobs.items():
        monkeypatch.setattr(dm, name, value)
    if batch == 3:  # small tiles: every phase takes several a program (the next one's loads in flight)
        monkeypatch.setattr(dm, "TILE", 1024)
    model = tiny(variant, bias=batch > 1, norm="layernorm" if batch < 3 else "rmsnorm")
    steps = 2  # the second step reads the row the first wrote
    assert_matches_the_model(*decode_both(model, batch, 40, steps, programs=8), rows=40 + steps)


@needs_child
def test_interp_mlp_switched_on_a_live_decoder_and_a_tile_past_the_hidden_units(monkeypatch):
    """FUSED_MLP switched between steps of one decoder (the stacked W_proj is rebuilt in the other layout), and MLP
    tiles of 128 hidden units over a hidden width of 192 (the second tile half past it), at 2 sequences."""
    monkeypatch.setattr(dm, "MLP_UNITS", 128)
    model = tiny("tucker", n_embd=48, n_head=4, bias=True)
    assert model.transformer.h[0].mlp.c_fc.out_features == 192
    got, want, caches, ref, mega = decode_both(model, 2, 20, 1, programs=3)
    assert_matches_the_model(got, want, caches, ref, mega, rows=21)  # the caches too: layer 1's k, v rows
    for fused, i in ((False, 0), (True, 1)):
        monkeypatch.setattr(dm, "FUSED_MLP", fused)
        tok, pos = torch.tensor([[5 + i], [9]]), torch.tensor([21])  # (the row both write, rewritten)
        want = model.decode_step(tok, ref, pos)
        torch.testing.assert_close(mega.decode_step(tok, caches, pos), want, rtol=1e-4, atol=1e-4)
        assert mega.weights["wpr"].shape[1:] == ((48, 192) if not fused else (192, 48))


@needs_child
def test_interp_step_kernel_with_value_heads_wider_than_the_keys_and_an_odd_width(monkeypatch):
    """Tucker with U~3 twice U3's rank (keys 16 wide, values 32: every other case has Dk = Dv, where a key stride
    used for a value, or the reverse, goes unseen) at n_embd 48 (the row tiles 64 wide, masked) with RMSNorm
    (its mean square over the 48 columns): one step from a 20-row cache, split over programs (16-row chunks), at
    2 sequences (the second's cache rows strided by the value width); logits and the cache rows equal the model's."""
    monkeypatch.setattr(dm, "BLOCK_N", 16)
    monkeypatch.setattr(dm, "MIN_CHUNK", 16)
    model = tiny("tucker", tucker_ranks_post=(2, 16, 32), n_layer=1, n_embd=48, norm="rmsnorm", bias=True)
    results = decode_both(model, 2, 20, 1, programs=4)
    assert (results[-1].dk, results[-1].dv, results[-1].d) == (16, 32, 48)
    assert_matches_the_model(*results, rows=21)


@needs_child
@pytest.mark.parametrize("batch", [1, 5])
def test_interp_step_kernel_merges_splits_whose_scores_are_all_very_negative(batch):
    """Every score of every head near -144 (MQA, q and k from the biases alone, q = 6 and k = -6 in each of 16 dims,
    scaled by 1/sqrt(16); the cached keys the same within noise): the softmax is shift-invariant, the model's step is
    fine, and so must the merge of the splits be, its max taken over the real splits only (an unused split slot,
    here the second of the two splits the 11 rows could take, weighing in at 0 would send exp2(score - max) below
    fp32's range and the output to 0 / 0). At 1 sequence (decode_mega's merge) and 5 (decode_wide's)."""
    model = tiny("mqa", bias=True, n_layer=1)
    with torch.no_grad():
        attn = model.transformer.h[0].attn
        attn.c_attn.weight[:80].zero_()  # q's 4 heads and the one k head
        attn.c_attn.bias[:64].fill_(6.0)
        attn.c_attn.bias[64:80].fill_(-6.0)
    gen = torch.Generator().manual_seed(1)
    ref = model.new_caches(batch, 12)
    ref[0].store["k"].copy_(-6.0 + 0.1 * torch.randn(ref[0].store["k"].shape, generator=gen))
    ref[0].store["v"].copy_(torch.randn(ref[0].store["v"].shape, generator=gen))
    caches = model.new_caches(batch, 12)
    for name in caches[0].store:
        caches[0].store[name].copy_(ref[0].store[name])
    mega = dm.step_decoder(model, caches, programs=2 * batch)
    tok, pos = torch.arange(batch).reshape(batch, 1) + 3, torch.tensor([10])
    with torch.no_grad():
        want = model.decode_step(tok, ref, pos).float()
        got = mega.decode_step(tok, caches, pos).float()
    assert mega.s_max == 2
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@needs_child
def test_interp_step_kernel_follows_a_weight_change(monkeypatch):
    model = tiny("tucker")
    got, want, caches, _, mega = decode_both(model, 1, 20, 1, programs=3)
    with torch.no_grad():
        model.transformer.h[1].attn.core.mul_(1.5)  # an in-place change: a new version of the parameter
        model.lm_head.weight.mul_(0.5)
    ref_caches = model.new_caches(1, 22)
    for c, r in zip(caches, ref_caches):
        for name in c.store:
            r.store[name].copy_(c.store[name])
    tok, pos = torch.tensor([[5]]), torch.tensor([21])
    want = model.decode_step(tok, ref_caches, pos)
    torch.testing.assert_close(mega.decode_step(tok, caches, pos), want, rtol=1e-4, atol=1e-4)


@needs_child
@pytest.mark.parametrize("variant", ["tucker_shared", "tucker_rope"])
def test_interp_static_decoder_with_the_step_kernel_matches_eager(variant):
    """StaticDecoder(mega=True): a prefill through the model (with RoPE: its keys cached rotated), then steps of the
    kernel, the same logits as the model's own steps."""
    model = tiny(variant)
    prompt = torch.randint(101, (2, 7), generator=torch.Generator().manual_seed(3))
    outs = []
    for mega in (False, True):
        dec = StaticDecoder(model, 2, max_len=20, mega=mega)
        logits = [dec.prefill(prompt)]
        for _ in range(4):
            logits.append(dec.step(logits[-1].argmax(-1, keepdim=True)).clone())
        outs.append(torch.stack(logits))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-4)


def test_unsupported_models_are_refused_with_the_reason():
    cases = {"MLA with decoupled RoPE": dict(attn="mla", q_rank=16, kv_rank=16, pos_emb="rope", mla_rope="decoupled"),
             "SwiGLU": dict(mlp="swiglu"), "head dims 24, 24": dict(attn="mla", q_rank=16, kv_rank=24),
             "keys rotated as read (a shared latent, MLA's latent RoPE) 16 wide: at least 32":
                 dict(attn="tucker", tucker_ranks=(2, 16, 16), shared_kv=True, pos_emb="rope"),
             "keys rotated as read (a shared latent, MLA's latent RoPE) 16 wide":
                 dict(attn="mla", q_rank=16, kv_rank=16, pos_emb="rope", mla_rope="latent")}
    for why, over in cases.items():
        model = tiny("mha", **over)
        assert why in (dm.unsupported(model, 1) or ""), why
    with pytest.MonkeyPatch.context() as mp:  # past the device checks (a CPU model), as in the interpreter
        mp.setattr(dm, "kernel_unavailable", lambda t, ops: None)
        mp.setattr(dm, "_triton_available", lambda: True)
        for served in (dict(attn="tucker", tucker_ranks=(2, 16, 16), pos_emb="rope"),  # keys cached rotated: 16 fine
                       dict(attn="tucker", tucker_ranks=(2, 16, 32), shared_kv=True, pos_emb="rope")):
            assert dm.unsupported(tiny("mha", **served), 1) is None, served
    import decode_wide
    assert "batch" in dm.unsupported(tiny("mha"), decode_wide.MAX_ROWS + 1)


def test_rope_rows_interleave_each_q_and_k_head():
    """MegaDecoder.rope_rows: within each head phase A rotates, row 2 i takes dim i and row 2 i + 1 dim i + Dk/2 (the
    pairs RoPE rotates, side by side in a tile); the other rows keep their order. A hand count: one query and one key
    head of 4, a value head of 4; the keys rotated in phase A (rope 1) or as read (rope 2: their rows untouched)."""
    from types import SimpleNamespace
    me = SimpleNamespace(dk=4, nH=1, nKV=1, device="cpu", rope=1)
    assert dm.MegaDecoder.rope_rows(me, 12).tolist() == [0, 2, 1, 3, 4, 6, 5, 7, 8, 9, 10, 11]
    me.rope = 2
    assert dm.MegaDecoder.rope_rows(me, 12).tolist() == [0, 2, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11]


def test_static_decoder_refuses_the_kernel_where_it_cannot_run():
    with pytest.raises(ValueError, match="decode step kernel"):
        StaticDecoder(tiny("mha", mlp="swiglu"), 1, max_len=8, mega=True)


@needs_cuda
@pytest.mark.parametrize("variant, batch, knobs", [(v, 1, {}) for v in VARIANTS] + [
    ("tucker", 1, UNFUSED), ("tucker", 1, AHEAD), ("tucker", 1, LATE), ("gqa", 3, {}), ("tucker_shared", 3, {}),
    ("mha", 4, UNFUSED), ("tucker", 1, ROWS_3D), ("mha", 4, ROWS_3D), ("tucker_shared", 3, COPIES),
    ("tucker", 1, BEHIND)],
    ids=lambda p: ("-".join(f"{k}={v}" for k, v in p.items()) or "defaults") if isinstance(p, dict) else None)
def test_cuda_one_launch_matches_the_phases_and_the_model(variant, batch, knobs, monkeypatch):
    """bf16 at GPT-2-like widths: the one-launch step (barriers) against the same phases launched one by one
    (the same arithmetic: equal up to the merge's order of arrival), and both against the model's step; the MLP
    fused (the default: its sums zeroed and added behind the barriers) and not, its W_proj^T tile loaded ahead, at
    1, 3 and 4 sequences (several MLP tiles a program)."""
    for name, value in knobs.items():
        monkeypatch.setattr(dm, name, value)
    check_one_launch(variant, batch)


def check_one_launch(variant, batch, dtype=torch.bfloat16):
    """On the GPU, bf16 (or dtype), GPT-2 widths, 3 layers, 1,500 cached rows: three steps of the step decoder for `batch`
    (decode_mega.step_decoder's) against the model's (relative error < 1.5e-2: the model's own step moves by 1.1-1.8e-2
    when one cache row a layer is replaced, the kernel was measured at 7.5e-3), the cache: its 1,500 context rows
    untouched and the three rows the steps wrote within 2e-2 of the model's, then the one launch against the phases
    launched one by one (< 5e-3: the same arithmetic up to the atomic sums' order; measured 0 at batch 1 and 2.8e-3 at
    batch 3). Returns the decoder."""
    over = dict(n_layer=3, n_head=12, n_embd=768, block_size=2048, vocab_size=50304)
    if variant.startswith("tucker"):
        over["tucker_ranks"] = (8, 64, 64)
    if variant.startswith("mla"):  # the benchmark's MLA [dcK, dcQ = 128]
        over.update(q_rank=128, kv_rank=128)
    model = tiny(variant, dtype=dtype, device="cuda", **over)
    got, want, caches, ref, mega = decode_both(model, batch, 1500, 3, programs=None, device="cuda")
    mega.check()
    for g, w in zip(got, want):
        assert ((g - w).norm() / w.norm()).item() < 1.5e-2
    for c, r in zip(caches, ref):
        for name in c.store:
            assert torch.equal(c.store[name][:, :, :1500], r.store[name][:, :, :1500]), name  # the context kept
            for row in range(1500, 1503):  # each step's row, where the model wrote it
                got_row, want_row = c.store[name][:, :, row].float(), r.store[name][:, :, row].float()
                assert ((got_row - want_row).norm() / want_row.norm()).item() < 2e-2, (name, row)
    pos = torch.tensor([1503], device="cuda")
    tok = torch.full((batch, 1), 7, device="cuda")
    one = mega.decode_step(tok, caches, pos).float().clone()
    phased = mega.decode_step(tok, caches, pos, phases=True).float().clone()
    mega.check()
    assert ((one - phased).norm() / phased.norm()).item() < 5e-3
    return mega


@pytest.mark.parametrize("variant, batch, want", [("mha", 1, False), ("gqa", 1, False), ("mqa", 1, True),
                                                   ("tucker", 1, True), ("tucker", 2, False)])
def test_w_proj_ahead_where_phase_a_leaves_room(variant, batch, want, monkeypatch):
    """MLP_PROJ_AHEAD=None: W_proj^T's tile is loaded at the MLP's start where phase A's tile is at most PROJ_ROOM
    elements (GPT-2 widths on 264 programs: MQA's and Tucker's 4 columns at batch 1, not MHA's 16 nor GQA's 8, nor
    Tucker's at batch 2); True / False force it."""
    monkeypatch.setattr(dm, "kernel_unavailable", lambda t, ops: None)
    monkeypatch.setattr(dm, "_triton_available", lambda: True)
    over = dict(n_layer=1, n_head=12, n_embd=768, block_size=64, vocab_size=128)
    if variant == "gqa":
        over["n_kv_head"] = 4
    if variant == "tucker":
        over["tucker_ranks"] = (8, 64, 64)
    model = tiny(variant, dtype=torch.bfloat16, **over)
    mega = dm.MegaDecoder(model, model.new_caches(batch, 64), programs=264)
    bn = mega._tiling(mega._stacked_weights()["wqkv"].size(1), 768)[0]
    assert mega.proj_ahead(bn) == want
    for forced in (True, False):
        monkeypatch.setattr(dm, "MLP_PROJ_AHEAD", forced)
        assert mega.proj_ahead(bn) == forced


def test_caches_of_another_dtype_or_shape_are_refused(monkeypatch):
    """The kernel writes and reads the caches as the weights' dtype and the layer's (heads, dim): anything else is a
    ValueError naming the layer, before any launch (the device checks made to pass as in the interpreter)."""
    monkeypatch.setattr(dm, "kernel_unavailable", lambda t, ops: None)
    monkeypatch.setattr(dm, "_triton_available", lambda: True)
    model = tiny("tucker")
    with pytest.raises(ValueError, match="layer 0's cache"):
        dm.MegaDecoder(model, model.new_caches(1, 16, dtype=torch.float16))
    with pytest.raises(ValueError, match="caches for 2 layers"):
        dm.MegaDecoder(model, model.new_caches(1, 16)[:1])
    with pytest.raises(ValueError, match="layer 0's cache"):
        dm.MegaDecoder(model, tiny("mha").new_caches(1, 16))  # MHA's 4 heads of 16, not one latent


def test_profile_script_refuses_an_unknown_variant():
    from scripts import profile_mega
    with pytest.raises(SystemExit, match="unknown variant 'nope'.*tucker_8_64_64"):
        profile_mega.profile_variant("nope", 16, 1, 1)


@needs_cuda
def test_cuda_timed_step_stamps_every_barrier_in_order():
    """timed_step: the same logits as an untimed step (the stamps change no arithmetic); every program's stamps rise
    through the step (start <= arrival <= release <= next arrival, by its cycle counter too), and no program is
    released before the last program has arrived at that barrier (the global timer across programs); each SM holds
    PROGRAMS_PER_SM programs (the start slot's SM stamps)."""
    over = dict(n_layer=2, n_head=12, n_embd=768, block_size=2048, vocab_size=50304, tucker_ranks=(8, 64, 64))
    model = tiny("tucker", dtype=torch.bfloat16, device="cuda", **over)
    caches = model.new_caches(1, 1024, device="cuda")
    mega = dm.MegaDecoder(model, caches)
    tok, pos = torch.tensor([[5]], device="cuda"), torch.tensor([700], device="cuda")
    plain = mega.decode_step(tok, caches, pos).float().clone()
    stamps = mega.timed_step(tok, caches, pos)
    mega.check()
    assert ((mega.logits.float() - plain).norm() / plain.norm()).item() < 1e-2
    assert stamps.shape == (mega.programs, 5 * 2 + 2, 4) and mega.times is None
    stamped = stamps[:, :, 0].ne(0)  # a slot every program stamps, or none (E's with the fused MLP: no barrier)
    assert (stamped.all(0) | ~stamped.any(0)).all()
    skipped = [b for b in range(12) if not stamped[0, b]]
    assert skipped == ([4, 9] if dm.FUSED_MLP else [])
    stamps = stamps[:, stamped[0]]
    for col in (0, 1):  # ns, cycles
        seq = torch.cat([stamps[:, :1, col], stamps[:, 1:-1, [col, col + 2]].reshape(mega.programs, -1),
                         stamps[:, -1:, col]], dim=1)
        assert (seq[:, 1:] >= seq[:, :-1]).all()
    last_arrival = stamps[:, 1:-1, 0].max(dim=0).values
    assert (stamps[:, 1:-1, 2] >= last_arrival).all()
    sms = torch.cuda.get_device_properties(0).multi_processor_count  # every SM runs PROGRAMS_PER_SM programs
    assert torch.bincount(stamps[:, 0, 2], minlength=sms).tolist() == [dm.PROGRAMS_PER_SM] * sms


def test_barrier_phases_sums_each_phase_over_the_layers():
    """profile_mega.barrier_phases against a hand count: 2 layers, 3 programs, program p arriving 100 p ns after a
    slot's base (a slot every 1000 ns) and released 400 + 10 p ns after it."""
    from scripts.profile_mega import PHASES, barrier_phases
    stamps = torch.zeros(3, 12, 4, dtype=torch.int64)
    for b in range(12):
        for p in range(3):
            stamps[p, b, 0], stamps[p, b, 2] = 1000 * b + 100 * p, 1000 * b + 400 + 10 * p
    got = barrier_phases(stamps, 2)
    # phase A: barrier 1 spans the median release 1410 ns from the median start 100 ns, barrier 6 the 1000 ns
    # between two median releases; the last arrival 1200 (then 6200 after 5410), the median release 210 ns after it
    assert got[PHASES[0]] == pytest.approx(dict(span=1.31 + 1.0, work=1.1 + 0.79, sync=0.42, median_work=1.0 + 0.69))
    assert got[PHASES[4]] == pytest.approx(dict(span=2.0, work=1.58, sync=0.42, median_work=1.38))
    assert got["LM head"] == pytest.approx(dict(span=0.79, work=0.79, sync=0.0, median_work=0.69))
    assert got["total"] == pytest.approx(11.2) and got["timer step"] == pytest.approx(0.01)
    with pytest.raises(ValueError, match="12 slots, expected 0 \\+ 5 x 3 \\+ 2"):
        barrier_phases(stamps, 3)
    stamps[:, [4, 9]] = 0  # the fused MLP: no barrier after E; F's row spans from B2D's release
    fused = barrier_phases(stamps, 2)
    assert fused[PHASES[3]] == dict(span=0.0, work=0.0, sync=0.0, median_work=0.0)
    assert fused[PHASES[4]] == pytest.approx(dict(span=4.0, work=3.58, sync=0.42, median_work=3.38))
    assert fused[PHASES[0]] == got[PHASES[0]] and fused["LM head"] == got["LM head"]
    assert fused["total"] == got["total"] and fused["timer step"] == got["timer step"]  # (the zeros left out)


def test_timed_step_needs_the_one_launch_step(monkeypatch):
    monkeypatch.setattr(dm, "kernel_unavailable", lambda t, ops: None)
    monkeypatch.setattr(dm, "_triton_available", lambda: True)
    model = tiny("tucker")
    caches = model.new_caches(1, 16)
    with pytest.raises(ValueError, match="one-launch step on a CUDA device"):
        dm.MegaDecoder(model, caches).timed_step(torch.tensor([[1]]), caches, torch.tensor([3]))


def test_sass_has_the_weight_loads_after_the_arrival(monkeypatch, tmp_path):
    """scripts/mega_sass (the step kernel compiled for sm_90 as the launcher compiles it, then ptxas and nvdisasm):
    with EARLY_ARRIVE the next phase's weight loads are issued after each release atomic (in flight while the
    program polls), without it before the atomic, whose MEMBAR then waits for them; 16-byte weight loads, no
    spills; PRODUCT_2D keeps every weight tile in the layout it was loaded in."""
    import re

    import triton
    from pathlib import Path
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    if not (tools / "nvdisasm").exists() or not (tools / "ptxas").exists():
        pytest.skip("Triton's wheel has no ptxas / nvdisasm here")
    from scripts import mega_sass
    early = mega_sass.compile_step("tucker_8_64_64", tmp_path / "early")
    monkeypatch.setattr(dm, "PRODUCT_2D", False)
    cube = mega_sass.compile_step("tucker_8_64_64", tmp_path / "3d")
    monkeypatch.setattr(dm, "PRODUCT_2D", True)
    monkeypatch.setattr(dm, "EARLY_ARRIVE", False)
    late = mega_sass.compile_step("tucker_8_64_64", tmp_path / "late")
    assert early["stack"] == 0 and early["loads"].get("LDG.E.128", 0) > 0
    sass = (tmp_path / "early" / "tucker_8_64_64.sass").read_text()  # cuobjdump's count holds every register named
    assert max(int(n) for n in re.findall(r"\bR(\d+)\b", sass)) < early["registers"] <= 255
    assert early["membars"] >= len(early["barriers"])  # a MEMBAR before each release atomic

    def tiles(r):  # converted tensors of weight-tile shape: rows x a whole row of K
        return [shape for shape, dt in r["converts"] if len(shape) == 2 and shape[0] > 1 and shape[1] == 1024]

    # PRODUCT_2D (the default): no weight tile moved to another layout (the 3D product moves phase A's, the MLP's two
    # and the LM head's through shared memory), the fused MLP phase in fewer instructions
    assert tiles(early) == [] and len(tiles(cube)) >= 3
    assert len(early["sections"]) == len(cube["sections"]) == 6 and early["sections"][3] < 0.7 * cube["sections"][3]
    assert len(early["barriers"]) == len(late["barriers"]) == 5  # the arrivals' code sites (the fused MLP: none in it)
    assert sum(a for _, a in late["barriers"]) == 0 < sum(a for _, a in early["barriers"])
    assert sum(b for b, _ in late["barriers"]) > sum(b for b, _ in early["barriers"])
    with pytest.raises(SystemExit, match="unknown variant"):
        mega_sass.compile_step("nope", tmp_path)


@pytest.mark.parametrize("knob, value, message", [
    ("PROGRAMS_PER_SM", 3, "PROGRAMS_PER_SM x NUM_WARPS = 3 x 4 > 8: every program"),
    ("MLP_UNITS", 12, "MLP_UNITS=12: a power of two")])
def test_settings_the_kernel_cannot_run_are_refused(knob, value, message, monkeypatch):
    """Refused by name: more than 8 warps an SM (every program must be resident: the grid barriers wait for all), an
    MLP tile of hidden units that is not a power of two."""
    monkeypatch.setattr(dm, "kernel_unavailable", lambda t, ops: None)
    monkeypatch.setattr(dm, "_triton_available", lambda: True)
    monkeypatch.setattr(dm, knob, value)
    model = tiny("tucker")
    with pytest.raises(ValueError, match=message):
        dm.MegaDecoder(model, model.new_caches(1, 16))


@needs_cuda
def test_cuda_generate_with_the_step_kernel():
    """GPT.generate(decode='mega') (sample.py --decode=mega): the decoder it keeps runs the one-launch step, and along
    the tokens it generated greedily its logits equal those of the default path (decode='graph') to bf16 rounding at
    every step, the prompt's prefill and a refill at block_size included."""
    over = dict(n_layer=2, n_head=12, n_embd=768, block_size=64, vocab_size=50304, tucker_ranks=(8, 64, 64))
    model = tiny("tucker", dtype=torch.bfloat16, device="cuda", **over)
    prompt = torch.randint(50304, (1, 16), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    out = model.generate(prompt, 60, temperature=0, decode="mega")  # 76 > block_size 64: one refill
    assert out.shape == (1, 76) and torch.equal(out[:, :16], prompt)

    def logits_along(decoder):  # generate's loop, fed the tokens above
        decoder.pos, n, rows = None, 16, []
        for _ in range(60):
            if decoder.pos is None or decoder.pos >= 64:
                keep = 32 if decoder.pos is not None else 64
                logits = decoder.prefill(out[:, max(0, n - keep):n])
            else:
                logits = decoder.step(out[:, n - 1:n])
            rows.append(logits.float().clone())
            n += 1
        return torch.cat(rows)

    (_, kept), = model.__dict__["_static_decoders"].values()  # the decoder generate built and kept
    assert kept.mega is not None and model.static_decoder(1, prompt.device, use_graph=True, mega=True) is kept
    with torch.no_grad():  # as generate runs them (the caches are views made without autograd)
        got = logits_along(kept)
        want = logits_along(model.static_decoder(1, prompt.device, use_graph=True))
    assert ((got - want).norm(dim=-1) / want.norm(dim=-1)).max().item() < 2e-2


@needs_cuda
def test_cuda_more_programs_than_resident_are_refused():
    """An explicit program count beyond what the SMs hold at NUM_WARPS warps a program is refused (the barriers would
    wait for programs that never start)."""
    model = tiny("tucker", dtype=torch.bfloat16, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    with pytest.raises(ValueError, match="every program must be resident"):
        dm.MegaDecoder(model, model.new_caches(1, 16, device="cuda"), programs=sms * (8 // dm.NUM_WARPS) + 1)


def test_every_refusal_names_its_reason_and_the_limits_are_served():
    """unsupported() says why, one reason a case: no sequences (batch 0), a parameter of another dtype than the LM
    head's or a dtype the kernel has no tiles for (float64), a value head dim that is no power of two, layers of
    different attention shapes, a norm other than model.LayerNorm / RMSNorm, no Triton; n_embd at MAX_DIM itself is
    served (only past it refused)."""
    assert "batch 0" in (dm.unsupported(tiny("mha"), 0) or "")
    with pytest.MonkeyPatch.context() as mp:  # past the device checks (a CPU model), as in the interpreter
        mp.setattr(dm, "kernel_unavailable", lambda t, ops: None)
        mp.setattr(dm, "_triton_available", lambda: True)
        mixed = tiny("mha")
        mixed.transformer.h[1].ln_1.to(torch.float16)
        assert "every parameter" in (dm.unsupported(mixed, 1) or "")
        assert "every parameter" in (dm.unsupported(tiny("mha", dtype=torch.float64), 1) or "")
        post = tiny("tucker", tucker_ranks_post=(2, 16, 24))
        assert "head dims 16, 24" in (dm.unsupported(post, 1) or "")
        two = tiny("tucker")
        two.transformer.h[1].attn = tiny("tucker", tucker_ranks=(2, 16, 32)).transformer.h[1].attn
        assert "different attention shapes" in (dm.unsupported(two, 1) or "")
        torch_norm = tiny("mha")
        torch_norm.transformer.h[0].ln_2 = torch.nn.LayerNorm(64)
        assert "norms other than" in (dm.unsupported(torch_norm, 1) or "")
        mp.setattr(dm, "MAX_DIM", 64)
        assert dm.unsupported(tiny("mha"), 1) is None  # n_embd 64 == MAX_DIM
        mp.setattr(dm, "MAX_DIM", 32)
        assert "n_embd 64 > 32" in (dm.unsupported(tiny("mha"), 1) or "")
        mp.setattr(dm, "MAX_DIM", 64)
        mp.setattr(dm, "_triton_available", lambda: False)
        assert "triton is not installed" in (dm.unsupported(tiny("mha"), 1) or "")


def test_caches_of_another_batch_or_length_and_foreign_caches_are_refused(monkeypatch):
    """Every layer's cache must hold the decoder's batch and max_len rows (the kernel strides them as the first
    layer's): anything else, a later layer's own consistent max_len too, is a ValueError naming the layer; a step given caches other than the ones the decoder
    stacked is refused before it launches (it would read and write its own copy); MLP_COPIES 0 is refused by name."""
    monkeypatch.setattr(dm, "kernel_unavailable", lambda t, ops: None)
    monkeypatch.setattr(dm, "_triton_available", lambda: True)
    model = tiny("tucker")
    caches = model.new_caches(1, 16)[:1] + model.new_caches(2, 16)[1:]
    with pytest.raises(ValueError, match="layer 1's cache"):
        dm.MegaDecoder(model, caches)
    caches = model.new_caches(1, 16)
    caches[1].max_len = 8  # its tensors keep 16 rows
    with pytest.raises(ValueError, match="layer 1's cache"):
        dm.MegaDecoder(model, caches)
    caches = model.new_caches(1, 16)[:1] + model.new_caches(1, 8)[1:]  # each consistent, not with the first layer
    with pytest.raises(ValueError, match="layer 1's cache .* of 8 positions, .* of 16"):
        dm.MegaDecoder(model, caches)
    caches = model.new_caches(1, 16)
    dec = dm.MegaDecoder(model, caches)
    with pytest.raises(ValueError, match="pass the caches the decoder was built on"):
        dec.decode_step(torch.tensor([[1]]), model.new_caches(1, 16), torch.tensor([3]))
    monkeypatch.setattr(dm, "MLP_COPIES", 0)
    with pytest.raises(ValueError, match="MLP_COPIES=0: a positive int"):
        dm.MegaDecoder(model, model.new_caches(1, 16))


def test_static_decoder_refuses_mega_with_compile():
    """mega=True (the step as one kernel) and compile=True exclude each other: a ValueError saying so, whatever the
    model (before any kernel check)."""
    with pytest.raises(ValueError, match="exclude each other"):
        StaticDecoder(tiny("mha"), 1, max_len=8, mega=True, compile=True)


SASS = """\
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/                   STG.E.128 desc[UR4][R6.64], R4 ;
        /*0020*/                   LDG.E.128 R8, desc[UR4][R2.64+0x10] ;
        /*0030*/                   LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64] ;
        /*0040*/                   LDG.E R9, desc[UR4][R2.64+0x20] ;
        /*0050*/               @P3 MEMBAR.ALL.GPU ;
        /*0060*/               @P3 ATOMG.E.ADD.STRONG.GPU PT, R33, desc[UR28][R32.64], R35 ;
        /*0070*/                   LDG.E.128 R12, desc[UR4][R2.64+0x30] ;
        /*0080*/                   ATOMG.E.CAS.STRONG.GPU PT, R48, [R48], R52, R53 ;
.L_x_1:
        /*0090*/                   LDG.E.128 R4, desc[UR4][R2.64+0x40] ;
        /*00a0*/                   RED.E.ADD.STRONG.GPU desc[UR4][R6.64], R4 ;
        /*00b0*/                   LDG.E.64 R4, desc[UR4][R2.64+0x50] ;
        /*00c0*/                   REDUX.OR UR20, R50 ;
        /*00d0*/                   LDG.E.64 R6, desc[UR4][R2.64+0x58] ;
        /*00e0*/                   LDL.64 R8, [R1+0x8] ;
        /*00f0*/               @P3 ATOMG.E.ADD.STRONG.GPU PT, R33, desc[UR28][R32.64], R35 ;
        /*0100*/                   LDG.E.128 R12, desc[UR4][R2.64+0x60] ;
        /*0110*/                   STG.E.128 desc[UR4][R6.64], R12 ;
        /*0120*/                   LDG.E.128 R12, desc[UR4][R2.64+0x70] ;
        /*0130*/                   EXIT ;
"""


def test_sass_parsers_on_a_known_snippet():
    """mega_sass's parsers on a hand-made nvdisasm snippet. barrier_loads: for each release atomic (ATOMG.E.ADD), the
    global loads (LDG, not LDGSTS nor LDL) back to the last store (STG or RED, not REDUX), then those up to the poll
    (ATOMG.E.CAS) or the end: (2, 1) and (2, 2). phase_sections: instructions (not labels) from the start, then from
    each poll, to the next arrival, and after the last poll: 6, 7, 12. layout_converts: every convert_layout's
    source shape and element type."""
    from scripts.mega_sass import barrier_loads, layout_converts, phase_sections
    assert barrier_loads(SASS) == [(2, 1), (2, 2)]
    assert phase_sections(SASS) == [6, 7, 12]
    ttgir = """\
    %a = ttg.convert_layout %x_1 : tensor<16x1024xbf16, #blocked> -> tensor<16x1024xbf16, #mma> loc(#loc1)
    %b = ttg.local_alloc %x_2 : (tensor<64x64xf16, #blocked>) -> !ttg.memdesc<64x64xf16>
    %c = ttg.convert_layout %x_3 : tensor<1024xf32, #blocked6> -> tensor<1024xf32, #ttg.slice<{dim = 0}>> loc(#loc2)
    %d = ttg.convert_layout %x_4 : tensor<2x16x64xi1, #blocked2> -> tensor<2x16x64xi1, #blocked3>
"""
    assert layout_converts(ttgir) == [((16, 1024), "bf16"), ((1024,), "f32"), ((2, 16, 64), "i1")]


def test_sass_main_passes_its_arguments_and_reports(monkeypatch, capsys, tmp_path):
    """mega_sass.main (compile_step stubbed): --variant, --out_dir, --batch (1 by default), --rope, --arch and
    --dtype reach compile_step, a --knob is set before it compiles; the report names decode_wide's phases above MAX_ROWS
    sequences only, lists the weight-tile-shaped conversions alone (more than 1 row by at least 256 columns) and each
    release atomic's two load counts."""
    from scripts import mega_sass
    monkeypatch.setattr(dm, "EARLY_ARRIVE", dm.EARLY_ARRIVE)  # the knob set below, restored after the test
    calls = []

    def compile_step(variant, out_dir, batch=1, rope=False, arch=90, dtype=torch.bfloat16):
        calls.append((variant, out_dir, batch, rope, dm.EARLY_ARRIVE, arch, dtype))
        return dict(registers=90, stack=0, shared=1024, hmma=0, ldgsts=0, membars=5, loads={"LDG.E.128": 7},
                    sections=[3, 4], barriers=[(2, 0), (0, 3)],
                    converts=[((16, 1024), "bf16"), ((1, 1024), "bf16"), ((16, 128), "fp32"), ((512,), "bf16")])
    monkeypatch.setattr(mega_sass, "compile_step", compile_step)
    mega_sass.main(["--out_dir", str(tmp_path), "--knob", "decode_mega.EARLY_ARRIVE=False"])
    out = capsys.readouterr().out
    assert calls == [("tucker_8_64_64", tmp_path, 1, False, False, 90, torch.bfloat16)]
    assert "step kernel, tucker_8_64_64, batch 1, sm_90, bfloat16," in out
    assert "(A, B1, B2D, MLP, ..., LM head): 3, 4" in out and "columns): 1 (16x1024 bf16)" in out
    assert "release atomic 1: 0 global loads since the phase's last store, 3 between it and the first poll" in out
    for batch, wide in ((dm.MAX_ROWS, False), (dm.MAX_ROWS + 1, True)):
        mega_sass.main(["--variant", "mha", "--out_dir", str(tmp_path), "--batch", str(batch), "--rope"])
        assert calls[-1][:4] == ("mha", tmp_path, batch, True)
        assert ("(the embeddings, A, B1, B2, D, E, F, ..., LM head)" in capsys.readouterr().out) == wide
    mega_sass.main(["--out_dir", str(tmp_path), "--arch", "86"])  # --arch reaches the compile and the report
    assert calls[-1][5] == 86 and "batch 1, sm_86," in capsys.readouterr().out
    mega_sass.main(["--out_dir", str(tmp_path), "--arch", "75", "--dtype", "float16"])  # --dtype likewise
    assert calls[-1][5:] == (75, torch.float16) and "batch 1, sm_75, float16," in capsys.readouterr().out


def test_sass_compiles_decode_megas_kernel_up_to_max_rows(monkeypatch, tmp_path):
    """mega_sass.compile_step at MAX_ROWS sequences (its compile stubbed: the recorded launch handed over) records
    decode_mega's step kernel, not decode_wide's (above MAX_ROWS: tests/test_decode_wide.py's sass tests), its
    one-launch step (ONLY 0) untimed; the modules' kernels and device gates are restored after."""
    import decode_attention as da
    import decode_wide as dw
    from scripts import mega_sass
    from scripts.kernel_compile import typed
    saved = (da._interpret, dm._interpret, dm._mega_step_kernel, dw._wide_step_kernel)
    seen = []

    class Recorded(Exception):
        pass

    def compile_launch(kernel, args, kwargs, arch):
        seen.append((kernel, args, kwargs, arch))
        raise Recorded
    monkeypatch.setattr(mega_sass, "compile_launch", compile_launch)
    with pytest.raises(Recorded):
        mega_sass.compile_step("tucker_8_64_64", tmp_path, batch=dm.MAX_ROWS)
    (kernel, args, kwargs, arch), = seen
    assert kernel is dm._mega_step_kernel and arch == 90
    const = typed(kernel, args, kwargs)[1]
    assert const["ONLY"] == 0 and not const["TIMING"]
    assert (da._interpret, dm._interpret, dm._mega_step_kernel, dw._wide_step_kernel) == saved


def test_barrier_phases_median_work_is_each_programs_own():
    """barrier_phases' `median work` is the median over programs of each program's arrival minus its OWN release
    from the barrier before (not the median release), and `timer step` reads ns stamps only (slot 0's third column
    holds the program's SM): 1 layer, 3 programs arriving 100 p ns after a slot's base, released 420, 400 and 410 ns
    after it, on SMs 7, 8, 9."""
    from scripts.profile_mega import PHASES, barrier_phases
    stamps = torch.zeros(3, 7, 4, dtype=torch.int64)
    for b in range(7):
        for p, off in enumerate((20, 0, 10)):
            stamps[p, b, 0], stamps[p, b, 2] = 1000 * b + 100 * p, 1000 * b + 400 + off
    stamps[:, 0, 2] = torch.tensor([7, 8, 9])  # the start slot's SM ids
    got = barrier_phases(stamps, 1)
    # B1: own work 1000 + 100 p - (400 + off_p) = 580, 700, 790 ns: median 0.70 us (the median release's 0.69)
    assert got[PHASES[1]] == pytest.approx(dict(span=1.0, work=0.79, sync=0.21, median_work=0.70))
    assert got["timer step"] == pytest.approx(0.01)  # releases 10 ns apart, never the SM ids' 1


def _events(us):
    from types import SimpleNamespace
    return [SimpleNamespace(time_range=SimpleNamespace(elapsed_us=lambda x=x: x)) for x in us]


@pytest.mark.parametrize("fused", [True, False])
def test_profile_variant_attributes_each_launch_to_its_phase(fused, monkeypatch):
    """profile_variant on recorded kernel times (setup and the profiler stubbed): a step's launches are each layer's
    PHASE_LAUNCHES in order, then the LM head; a phase's time sums its launches over the layers, the median over
    the steps; F's row 0 with the fused MLP (no launch); a record count not steps x (layers x launches + 1) refused."""
    from types import SimpleNamespace
    from scripts import profile_mega as pm
    monkeypatch.setattr(dm, "FUSED_MLP", fused)
    order = dm.PHASE_LAUNCHES[fused]
    model = SimpleNamespace(config=SimpleNamespace(n_layer=2))
    monkeypatch.setattr(pm, "setup", lambda name, context, batch: (model, None, None, None, None))
    steps = []
    for s in (1, 3, 2):  # step s's launch of ONLY k in layer l takes s (10 k + l) us, its LM head s 100 us
        steps += [s * (10 * k + l) for l in range(2) for k in order] + [s * 100]
    records = {"n": len(steps)}

    def launches(mega, tokens, caches, pos, n, kernel):
        assert kernel == "_mega_step_kernel" and n == 3
        return _events(steps[:records["n"]])
    monkeypatch.setattr(pm, "phase_launches", launches)
    got = pm.profile_variant("mha", 16, 1, 3)
    want = {p: (2 * (10 * (i + 1) * 2 + 1) if i + 1 in order else 0.0) for i, p in enumerate(pm.PHASES)}
    assert got == {**want, "LM head": 200}
    records["n"] -= 1
    with pytest.raises(RuntimeError, match=f"{len(steps) - 1} kernel records, expected 3 x {2 * len(order) + 1}"):
        pm.profile_variant("mha", 16, 1, 3)


def test_profile_wide_attributes_each_launch_to_its_phase(monkeypatch):
    """profile_wide likewise on decode_wide's launches: the embeddings first, each layer's PHASES, the LM head."""
    from types import SimpleNamespace
    import decode_wide as dw
    from scripts import profile_mega as pm
    model = SimpleNamespace(config=SimpleNamespace(n_layer=2))
    monkeypatch.setattr(pm, "setup", lambda name, context, batch: (model, None, None, None, None))
    steps = []
    for s in (1, 3, 2):
        steps += [s * 7] + [s * (10 * k + l) for l in range(2) for k in dw.PHASES] + [s * 100]
    monkeypatch.setattr(pm, "phase_launches", lambda mega, tokens, caches, pos, n, kernel: _events(
        steps if kernel == "_wide_step_kernel" else []))
    got = pm.profile_wide("mha", 16, 32, 3)
    want = {pm.WIDE_PHASES[k - 1]: 2 * (10 * k * 2 + 1) for k in dw.PHASES}
    assert got == {"embeddings": 14, **want, "LM head": 200}
    with pytest.raises(RuntimeError, match=f"{len(steps)} kernel records, expected 2 x {2 * 6 + 2}"):
        pm.profile_wide("mha", 16, 32, 2)


@pytest.mark.parametrize("batch", [dm.MAX_ROWS, dm.MAX_ROWS + 1])
def test_time_barriers_reads_each_decoders_layout(batch, monkeypatch):
    """time_barriers (setup stubbed, timed_step's stamps made up): decode_mega's slot layout up to MAX_ROWS
    sequences, decode_wide's (the embeddings' barrier first, six phases a layer) above; each entry the median over
    the steps (three steps, stamps 1x, 3x and 2x one step's); the decoder checked after the timed steps."""
    from types import SimpleNamespace
    from scripts import profile_mega as pm
    wide = batch > dm.MAX_ROWS
    slots = 1 + 6 + 2 if wide else 5 + 2
    base = torch.zeros(3, slots, 4, dtype=torch.int64)
    for b in range(slots):
        for p in range(3):
            base[p, b, 0], base[p, b, 2] = 1000 * b + 100 * p + 1000, 1000 * b + 1400 + 10 * p
    runs = iter([base] * 3 + [base * 1, base * 3, base * 2])  # 3 warm-up steps, then the 3 timed
    calls = []
    mega = SimpleNamespace(decode_step=lambda *a: calls.append("step"),
                           timed_step=lambda *a: (calls.append("timed"), next(runs))[1],
                           check=lambda: calls.append("check"))
    model = SimpleNamespace(config=SimpleNamespace(n_layer=1))
    monkeypatch.setattr(pm, "setup", lambda name, context, b: (model, None, mega, None, None))
    got = pm.time_barriers("mha", 16, batch, 3)
    assert calls[-4:] == ["timed"] * 3 + ["check"]
    layout = dict(phases=pm.WIDE_PHASES, lead=("embeddings",)) if wide else {}
    want = pm.barrier_phases(base * 2, 1, **layout)  # every entry linear in the stamps: the median step's
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == (pytest.approx(v) if not isinstance(v, dict) else {f: pytest.approx(x) for f, x in v.items()})
    assert ("embeddings" in got) == wide


@pytest.mark.parametrize("per_sm, regs, fit, sms, programs, want", [
    (2, 255, None, 132, None, 264), (2, 255, 1, 132, None, 132), (2, 255, 3, 132, None, 264),
    (2, 255, 1, 132, 100, 100), (2, 255, None, 132, 264, 264), (2, 255, 1, 40, None, 40),
    (3, 168, None, 132, None, 396), (2, 255, 1, None, None, dm.INTERPRET_PROGRAMS), (2, 255, None, None, 7, 7)])
def test_program_count_caps_programs_an_sm_by_shared_memory(per_sm, regs, fit, sms, programs, want):
    """MegaDecoder.program_count (its constructor's arithmetic, CPU-testable): sms x PROGRAMS_PER_SM, capped by the
    programs an SM's shared memory holds (fit: 132 SMs of an H200 at fit 1, 132; a T4's 40 SMs, 40; fit None or
    above PROGRAMS_PER_SM, no cap); `programs` as given within what is resident; the interpreter (sms None):
    INTERPRET_PROGRAMS unless given."""
    assert dm.MegaDecoder.program_count(4, per_sm, "decode_wide", regs, fit, sms, programs, "WideDecoder") == want


@pytest.mark.parametrize("per_sm, regs, fit, sms, programs, match", [
    (2, 255, 1, 132, 200, r"WideDecoder: programs=200 > 132 SMs x 1 programs of 4 warps \(what an SM's registers "
                          r"and shared memory hold\): every program must be resident at once"),
    (2, 255, None, 132, 265, r"WideDecoder: programs=265 > 132 SMs x 2 programs of 4 warps \(what an SM's "
                             r"registers hold\)"),
    (3, 255, 1, 132, None, r"decode_wide: PROGRAMS_PER_SM x NUM_WARPS = 3 x 4 > 8: every program must be resident "
                           r"at once \(a grid barrier waits for all\), and 8 warps of up to 255 registers fill"),
    (3, 255, None, None, None, r"decode_wide: PROGRAMS_PER_SM x NUM_WARPS = 3 x 4 > 8")])
def test_program_count_refuses_programs_that_cannot_all_be_resident(per_sm, regs, fit, sms, programs, match):
    """More programs than the SMs' registers (and, with a fit, shared memory) hold at once are refused, naming
    programs; PROGRAMS_PER_SM beyond the register file is refused first, whatever the fit, in the interpreter too."""
    with pytest.raises(ValueError, match=match):
        dm.MegaDecoder.program_count(4, per_sm, "decode_wide", regs, fit, sms, programs, "WideDecoder")

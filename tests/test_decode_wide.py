"""decode_wide: the decode step at 5 .. MAX_ROWS sequences in one persistent kernel, its products on tensor cores.

Properties: for MHA, GQA, MQA, Tucker and MLA (each with shared KV too), MHA and Tucker (shared too) and MLA with
RoPE, the wide step's logits and the cache rows it writes equal GPT.decode_step's over consecutive steps (the cache
split over programs and merged, the products' K in several steps, LayerNorm and RMSNorm, with and without biases);
decode_mega.step_decoder picks the GEMV step up to decode_mega.MAX_ROWS sequences and this one above, and both
refuse a batch outside their range by name; StaticDecoder(mega=True) at batch 6 decodes what the eager step decodes.
CPU: Triton's interpreter (a phase a launch), float32, to float32 rounding. CUDA (skipped without a GPU): the one
launch against the phases and the model, bf16, GPT-2 widths, batch 8 and 32.
"""
import pytest
import torch

import decode_mega as dm
import decode_wide as dw
from interpreted import needs_child
from model import StaticDecoder
from test_decode_mega import assert_matches_the_model, check_one_launch, decode_both, needs_cuda, tiny


def no_device_checks(monkeypatch):
    """Let a CPU model through unsupported()'s device checks (as in the interpreter)."""
    monkeypatch.setattr(dm, "kernel_unavailable", lambda t, ops: None)
    monkeypatch.setattr(dm, "_triton_available", lambda: True)


@needs_child
@pytest.mark.parametrize("variant, batch, knobs, norm, bias, context", [
    ("mha", 5, {}, "layernorm", False, 40),
    ("gqa", 5, dict(BK=16, SPLIT_F=3, ATTN_GROUPS=2, MERGE_HEADS=8), "rmsnorm", True, 40),
    ("mqa", 6, dict(SPLIT_D=1, SPLIT_F=1, ATTN_GROUPS=1), "layernorm", True, 40),
    ("tucker", 5, dict(BK=32, ATTN_GROUPS=4), "layernorm", False, 40),
    ("tucker", 6, {}, "rmsnorm", True, 40),
    ("tucker", 5, {}, "layernorm", True, 100),
    ("tucker_shared", 7, dict(BN_LM=16, BK=16, SPLIT_D=4), "rmsnorm", True, 40),
    ("tucker_shared", 6, dict(ATTN_GROUPS=2), "layernorm", False, 100),
    ("mla_shared", 6, {}, "rmsnorm", False, 100),
    ("mha_rope", 5, {}, "layernorm", True, 40),
    ("tucker_rope", 6, {}, "rmsnorm", False, 100),
    ("tucker_shared_rope", 6, dict(ATTN_GROUPS=2), "layernorm", True, 100),
    ("mla_latent", 5, {}, "rmsnorm", False, 40)])
def test_interp_wide_step_matches_the_model(variant, batch, knobs, norm, bias, context, monkeypatch):
    """Two steps from a 40- or 100-row cache (split over the programs, merged; the rows past the cache's end hold
    random values): logits and the written cache rows equal the model's; a split's rows in whole steps, unmasked (at
    100 rows and 32-row steps: splits of 64 rows, two whole steps, then one whole step and a masked partial one),
    and its last partial step masked; the products' K in one step (BK 128 over K 64 .. 256: masked) or several (BK
    16, 32); D's and F's K split over 2 and 4 programs a tile (the defaults), 3 (F's 256 in parts of 96: the last
    one shorter), 4 (D's 64 in BK-sized parts) or none; LM head tiles of 64 and 16 columns over a vocabulary of 101
    (the last tile partly past it); the norms folded into the matrices after them (LayerNorm's mean taken out after
    the product), with and without biases; a step's rows in groups of 16 rows, 2 (splits of 32 rows: separate K and
    V by default) or 4 (one split of 64 rows, its last group past the cache's end, empty: a shared latent by
    default), each group's partial a split of its own for B2, or one group (16-row steps, decode_mega's splits);
    B2's (sequence, head) pairs 2 a program (the default on 12 programs) or 8 (the last item partly past the
    batch's)."""
    for name, value in knobs.items():
        monkeypatch.setattr(dw, name, value)
    groups = dw.ATTN_GROUPS if isinstance(dw.ATTN_GROUPS, dict) else dict.fromkeys((False, True), dw.ATTN_GROUPS)
    monkeypatch.setattr(dw, "ATTN_ROWS", {k: 16 * g for k, g in groups.items()})  # a group's 16 rows a step
    monkeypatch.setattr(dm, "MIN_CHUNK", 16)
    model = tiny(variant, bias=bias, norm=norm, block_size=max(96, context + 8))
    results = decode_both(model, batch, context, 2, programs=12)
    assert isinstance(results[-1], dw.WideDecoder)
    assert_matches_the_model(*results, rows=context + 2)


@needs_child
def test_interp_wide_step_with_value_heads_wider_than_the_keys_and_an_odd_width(monkeypatch):
    """Tucker with U~3 twice U3's rank (keys 16 wide, values 32: the other cases all have Dk = Dv) at n_embd 48 (the
    embeddings' rows and the products' K masked inside a 64-wide tile; LayerNorm's sums over the 48 columns), 5
    sequences, a 40-row cache as one split on 8 programs: a whole 32-row step (two groups of 16), then a partial
    one at the advanced row pointers; one step's logits and cache rows equal the model's."""
    monkeypatch.setattr(dw, "ATTN_ROWS", {False: 32, True: 32})
    monkeypatch.setattr(dw, "ATTN_GROUPS", 2)
    monkeypatch.setattr(dm, "MIN_CHUNK", 16)
    model = tiny("tucker", tucker_ranks_post=(2, 16, 32), n_layer=1, n_embd=48, bias=True)
    results = decode_both(model, 5, 40, 1, programs=8)
    assert isinstance(results[-1], dw.WideDecoder) and (results[-1].dk, results[-1].dv) == (16, 32)
    assert_matches_the_model(*results, rows=41)


@needs_child
def test_interp_static_decoder_at_batch_6_matches_eager():
    """StaticDecoder(mega=True) at 6 sequences runs the wide step: prefill then four greedy steps, the eager
    step's logits."""
    model = tiny("tucker", bias=True)
    prompt = torch.randint(101, (6, 5), generator=torch.Generator().manual_seed(3))
    outs = []
    for mega in (False, True):
        dec = StaticDecoder(model, 6, max_len=16, mega=mega)
        assert (dec.mega is not None) == mega and (not mega or isinstance(dec.mega, dw.WideDecoder))
        logits = [dec.prefill(prompt)]
        for _ in range(4):
            logits.append(dec.step(logits[-1].argmax(-1, keepdim=True)).clone())
        outs.append(torch.stack(logits))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-4)


def test_step_decoder_picks_the_kernel_for_the_batch(monkeypatch):
    no_device_checks(monkeypatch)
    model = tiny("tucker")
    for batch, cls in ((1, dm.MegaDecoder), (dm.MAX_ROWS, dm.MegaDecoder), (dm.MAX_ROWS + 1, dw.WideDecoder),
                       (dw.MAX_ROWS, dw.WideDecoder)):
        dec = dm.step_decoder(model, model.new_caches(batch, 8), programs=4)
        assert type(dec) is cls, batch
    assert "batch 33" in dm.unsupported(model, dw.MAX_ROWS + 1)
    with pytest.raises(ValueError, match="the decode step kernel cannot serve this model: batch 33"):
        dm.step_decoder(model, model.new_caches(dw.MAX_ROWS + 1, 8))
    with pytest.raises(ValueError, match="WideDecoder serves 5 .. 32 sequences, the caches hold 4"):
        dw.WideDecoder(model, model.new_caches(4, 8))
    with pytest.raises(ValueError, match="MegaDecoder serves 1 .. 4 sequences, the caches hold 5"):
        dm.MegaDecoder(model, model.new_caches(5, 8))


@pytest.mark.parametrize("knob, value, why", [("BN", 8, "a power of two >= 16"), ("BK", 48, "a power of two >= 16"),
                                             ("BN_LM", 0, "a power of two >= 16"), ("SPLIT_F", 0, "a positive int"),
                                             ("SPLIT_D", 1.5, "a positive int"), ("BLOCK_N", 24, "a power of two"),
                                             ("ATTN_GROUPS", 3, "a power of two >= 1"),
                                             ("MERGE_HEADS", 3, "None or a power of two"),
                                             ("MERGE_HEADS", 0, "None or a power of two"),
                                             ("MAXNREG", 16, "None or an int from 32 to 255"),
                                             ("MAXNREG", 256, "None or an int from 32 to 255"),
                                             ("ATTN_STEP_ELEMS", 8.5, "an int >= 16"),
                                             ("BLOCK_N", 32, "with ATTN_GROUPS=4 a group's 8 rows, fewer than 16")])
def test_settings_the_kernel_cannot_run_are_refused(knob, value, why, monkeypatch):
    no_device_checks(monkeypatch)
    monkeypatch.setattr(dw, knob, value)
    model = tiny("mqa")
    with pytest.raises(ValueError, match=f"decode_wide: {knob}={value}: {why}"):
        dw.WideDecoder(model, model.new_caches(8, 8))


def test_programs_an_sm_are_held_to_the_register_file(monkeypatch):
    """Every program must be resident (the grid barriers wait for all): 3 programs of 4 warps an SM are refused at up
    to 255 registers a thread (3 x 4 x 32 x 255 > 65,536) and served under a cap of 168 (MAXNREG: 64,512)."""
    no_device_checks(monkeypatch)
    model = tiny("tucker")
    monkeypatch.setattr(dw, "PROGRAMS_PER_SM", 3)
    with pytest.raises(ValueError, match="decode_wide: PROGRAMS_PER_SM x NUM_WARPS = 3 x 4 > 8: every program"):
        dw.WideDecoder(model, model.new_caches(8, 8))
    monkeypatch.setattr(dw, "MAXNREG", 168)
    dw.WideDecoder(model, model.new_caches(8, 8))


H200_SHARED = (232448, 233472)  # decode_attention.shared_memory on an H100 / H200: a program's most, an SM's bytes
SM86_SHARED = (101376, 102400)  # on a GPU of 100 KB an SM (sm_86 / sm_89: RTX 3090 / 4090, A10, A6000, L4, L40)
T4_SHARED = (65536, 65536)  # on a T4 (sm_75: 64 KB an SM, all of it one program's)


def test_programs_an_sm_follow_its_shared_memory(monkeypatch):
    """_check_fits: the programs of shared_bytes() (+ the 1 KB an SM reserves each) an SM holds on the GPU at hand,
    which the step runs in place of PROGRAMS_PER_SM where fewer: on an H200, bf16 at batch 5 (60 KB a program) 3,
    fp32 (twice the tiles: 120 KB) 1, BK 256 at 4 stages in bf16 (120 KB) 1 and 2 at 3 stages; on a GPU of 100 KB an
    SM, 1 in bf16; fp32 there does not fit one program: refused by name. The interpreter has no limit (None)."""
    no_device_checks(monkeypatch)
    model = tiny("tucker")
    dec = dw.WideDecoder(model, model.new_caches(5, 8))  # fp32 on the CPU: served
    assert dec._check_fits() is None
    dec.device = torch.device("cuda")
    monkeypatch.setattr(dw, "pipelines_loads", lambda device: True)  # sm_80 and up
    monkeypatch.setattr(dw, "program_reserve", lambda device: 1024)
    monkeypatch.setattr(dw, "shared_memory", lambda device: H200_SHARED)
    assert dec.shared_bytes() == 122880 and dec._check_fits() == 1
    dec.dtype = torch.bfloat16
    assert dec.shared_bytes() == 61440 and dec._check_fits() == 3
    monkeypatch.setattr(dw, "BK", 256)
    assert dec.shared_bytes() == 122880 and dec._check_fits() == 1
    monkeypatch.setattr(dw, "STAGES", 3)
    assert dec.shared_bytes() == 81920 and dec._check_fits() == 2
    monkeypatch.setattr(dw, "BK", 128)
    monkeypatch.setattr(dw, "STAGES", 4)
    monkeypatch.setattr(dw, "shared_memory", lambda device: SM86_SHARED)
    assert dec._check_fits() == 1
    dec.dtype = torch.float32
    with pytest.raises(ValueError, match=r"decode_wide: torch.float32 weights, BK=128, STAGES=4, batch 5: a program's "
                                         r"pipelined tiles take 122880 B of shared memory, more than this GPU gives "
                                         r"one program \(101376 B.*decode='auto'"):
        dec._check_fits()
    # a T4 (sm_75: no pipelining, a program's tiles one float32 step, no 1 KB reserved a program) at batch 32: two
    # an SM in fp16 (32 KB each: all 64 KB), where the pipelined estimate (72 KB) refused even one; fp32 (both
    # operands of the LM head's product at once, 48 KB): one; a shared latent in fp32 (its step as K and as V at
    # once, 64 KB): one, all of it
    monkeypatch.setattr(dw, "pipelines_loads", lambda device: False)
    monkeypatch.setattr(dw, "program_reserve", lambda device: 0)
    monkeypatch.setattr(dw, "shared_memory", lambda device: T4_SHARED)
    dec = dw.WideDecoder(model, model.new_caches(32, 8))
    dec.device, dec.dtype = torch.device("cuda"), torch.float16
    assert dec.shared_bytes() == 73728 and dec.shared_bytes(pipelined=False) == 32768 and dec._check_fits() == 2
    dec.dtype = torch.float32
    assert dec.shared_bytes(pipelined=False) == 49152 and dec._check_fits() == 1
    shared = tiny("tucker", shared_kv=True, tucker_ranks=(2, 16, 64))  # GPT-2's latent: 128 rows of 64 a step
    dec = dw.WideDecoder(shared, shared.new_caches(32, 8))
    dec.device, dec.dtype = torch.device("cuda"), torch.float32
    assert dec.shared_bytes(pipelined=False) == 65536 and dec._check_fits() == 1
    monkeypatch.setattr(dw, "shared_memory", lambda device: (49152, 49152))  # a GPU of 48 KB: not even one, by name
    with pytest.raises(ValueError, match=r"batch 32: a program's tiles take 65536 B of shared memory, more than this "
                                         r"GPU gives one program \(49152 B"):
        dec._check_fits()


def test_shared_memory_counts_the_kilobyte_an_sm_reserves_a_program(monkeypatch):
    """Two programs an SM of 114 KB of tiles each fit 228 KB on their own but not with the 1 KB an SM reserves for
    each program: one runs an SM; 1 KB less a program, two. A program of the whole SM's bytes is refused."""
    no_device_checks(monkeypatch)
    model = tiny("tucker")
    dec = dw.WideDecoder(model, model.new_caches(5, 8))
    dec.device, dec.dtype = torch.device("cuda"), torch.bfloat16
    monkeypatch.setattr(dw, "pipelines_loads", lambda device: True)
    monkeypatch.setattr(dw, "program_reserve", lambda device: 1024)
    monkeypatch.setattr(dw, "shared_memory", lambda device: H200_SHARED)
    dec.shared_bytes = lambda pipelined=True: 114 * 1024
    assert dec._check_fits() == 1
    dec.shared_bytes = lambda pipelined=True: 113 * 1024
    assert dec._check_fits() == 2
    dec.shared_bytes = lambda pipelined=True: H200_SHARED[0]
    assert dec._check_fits() == 1
    dec.shared_bytes = lambda pipelined=True: H200_SHARED[0] + 1
    with pytest.raises(ValueError, match="more than this GPU gives one program"):
        dec._check_fits()


@pytest.mark.parametrize("variant, knobs", [("tucker_8_64_64", {}), ("tucker_shared_8_64_64", {}),
                                            ("tucker_8_64_64", dict(BK=256, STAGES=3)),
                                            ("tucker_shared_8_64_64", dict(BN_LM=16, ATTN_ROWS={False: 64, True: 512},
                                                                           ATTN_STEP_ELEMS=32768)),
                                            ("mla_shared128", {})])
def test_shared_bytes_is_the_compiles(variant, knobs, tmp_path, monkeypatch):
    """WideDecoder.shared_bytes (the fit check's estimate) equals the sm_90 compile's shared memory a program at 32
    rows: the LM head's tiles the largest (the defaults, and BK 256 at 3 stages), or the attention's (512 rows of a
    shared latent a step beside 16-column LM head tiles); MLA's latent of 128 at the rows attn_rows gives it."""
    import triton
    from pathlib import Path
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    if not (tools / "ptxas").exists():
        pytest.skip("Triton's wheel has no ptxas here")
    from scripts import mega_sass
    for name, value in knobs.items():
        monkeypatch.setattr(dw, name, value)
    r = mega_sass.compile_step(variant, tmp_path, batch=dw.MAX_ROWS)  # the decoder it compiles, its estimate beside
    assert r["shared_estimate"] == r["shared"]


def test_shared_bytes_is_the_compiles_on_ada(tmp_path):
    """The fit check's estimate holds where GPUs have 100 KB an SM (sm_86 / sm_89: RTX 3090 / 4090, A10, L40):
    decode_wide's step at 32 rows compiles there to WideDecoder.shared_bytes() a program (73,728 B, as on sm_90),
    no spills; one program an SM fits (102,400 B), two do not."""
    import triton
    from pathlib import Path
    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("Triton's wheel has no ptxas here")
    from scripts import mega_sass
    r = mega_sass.compile_step("tucker_8_64_64", tmp_path, batch=dw.MAX_ROWS, arch=86)
    assert r["shared_estimate"] == r["shared"] == 73728 and r["stack"] == 0
    assert (r["shared"] + 1024) <= SM86_SHARED[1] < 2 * (r["shared"] + 1024)


@pytest.mark.parametrize("variant, dtype, want", [("tucker_8_64_64", torch.float16, 32768),
                                                   ("tucker_shared_8_64_64", torch.float32, 65536)])
def test_shared_bytes_is_the_compiles_on_turing(variant, dtype, want, tmp_path):
    """Below sm_80 Triton does not pipeline (decode_attention.PIPELINED_FROM): decode_wide's step at 32 rows
    compiles for sm_75 (T4) to WideDecoder.shared_bytes(pipelined=False) a program: in fp16 the LM head's 64 x 128
    weight tile upcast to float32 (32,768 B, where the pipelined estimate says 73,728), in fp32 a shared latent's
    step as K and as V at once (65,536 B)."""
    import triton
    from pathlib import Path
    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("Triton's wheel has no ptxas here")
    from scripts import mega_sass
    r = mega_sass.compile_step(variant, tmp_path, batch=dw.MAX_ROWS, arch=75, dtype=dtype)
    assert r["shared_estimate"] == r["shared"] == want


@pytest.mark.parametrize("dk, dv, shared, rope, want", [
    (64, 64, False, 0, 64), (64, 64, True, 0, 128), (128, 128, True, 0, 64), (128, 128, False, 0, 32),
    (512, 512, True, 0, 64), (16, 16, True, 0, 128), (64, 64, True, 2, 64), (64, 64, False, 1, 64),
    (128, 128, False, 2, 32)])
def test_attention_rows_a_step_fit_the_element_budget(dk, dv, shared, rope, want):
    """attn_rows: ATTN_ROWS by whether K and V are one latent (64 / 128 rows), halved while a step's rows would hold
    more than ATTN_STEP_ELEMS (8,192) K and V elements (MLA's shared latent of 128: 64 rows; separate K and V of 128:
    32), never fewer than 16 rows a group (4 groups of a shared latent of 512: 64, 2 groups of separate K and V of
    128 rotated as read: 32), never more than ATTN_ROWS (a narrow latent of 16: 128); keys rotated as read (rope 2)
    count twice (Tucker shared with RoPE: 64 rows), keys cached rotated (rope 1) once."""
    from types import SimpleNamespace
    assert dw.WideDecoder.attn_rows(SimpleNamespace(dk=dk, dv=dv, shared=shared, rope=rope)) == want


@pytest.mark.parametrize("block_n, rope, want", [(64, 0, 64), (64, 1, 64), (64, 2, 32), (16, 2, 16), (128, 2, 64)])
def test_batch_1_attention_rows_halve_for_keys_rotated_as_read(block_n, rope, want, monkeypatch):
    """decode_mega's B1 (batch 1 to 4) takes BLOCK_N rows a step, half of them where keys are rotated as read (rope
    2: the rotated halves beside the read ones), never fewer than 16 (a tensor-core product's least)."""
    from types import SimpleNamespace
    monkeypatch.setattr(dm, "BLOCK_N", block_n)
    assert dm.MegaDecoder.attn_rows(SimpleNamespace(rope=rope)) == want


def test_norms_fold_into_the_matrices_after_them(monkeypatch):
    """The folded weights reproduce norm-then-linear: ((x - mean) rstd) W'^T + b' = LayerNorm(x) W^T + b, for
    the QKV, fc and LM head matrices, in float32 to its rounding; rebuilt after a weight change."""
    no_device_checks(monkeypatch)
    model = tiny("gqa", bias=True)
    dec = dw.WideDecoder(model, model.new_caches(5, 8))
    x = torch.randn(5, 64) * 3 + 1
    w = dec._stacked_weights()
    block = model.transformer.h[1]
    xn = (x - x.mean(-1, keepdim=True)) * torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + block.ln_1.eps)
    close = lambda got, want: torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        close(xn @ w["wqkv"][1].t() + w["bqkv"][1], block.attn.c_attn(block.ln_1(x)))
        close(xn @ w["wfc"][1].t() + w["bfc"][1], block.mlp.c_fc(block.ln_2(x)))
        close(xn @ w["wlm"].t() + w["blm"], model.lm_head(model.transformer.ln_f(x)))
        block.ln_2.weight.mul_(2.0)
        w = dec._stacked_weights()
        close(xn @ w["wfc"][1].t() + w["bfc"][1], block.mlp.c_fc(block.ln_2(x)))


def test_timed_step_needs_the_one_launch_step_on_a_gpu(monkeypatch):
    no_device_checks(monkeypatch)
    model = tiny("mqa")
    caches = model.new_caches(8, 8)
    with pytest.raises(ValueError, match="one-launch step on a CUDA device"):
        dw.WideDecoder(model, caches).timed_step(torch.zeros(8, 1, dtype=torch.long), caches, torch.tensor([3]))


def test_barrier_phases_reads_the_wide_layout():
    """profile_mega.barrier_phases on decode_wide's slots (the start, the embeddings' barrier, six a layer, the
    end) against a hand count: 1 layer, 3 programs, program p arriving 100 p ns after a slot's base (a slot every
    1000 ns) and released 400 + 10 p ns after it; then with B2's slot left empty (the parser's rule for a slot no
    program stamped): D spans from B1's release."""
    from scripts.profile_mega import WIDE_PHASES, barrier_phases
    stamps = torch.zeros(3, 9, 4, dtype=torch.int64)
    for b in range(9):
        for p in range(3):
            stamps[p, b, 0], stamps[p, b, 2] = 1000 * b + 100 * p, 1000 * b + 400 + 10 * p
    wide = dict(phases=WIDE_PHASES, lead=("embeddings",))
    got = barrier_phases(stamps, 1, **wide)
    assert got["embeddings"] == pytest.approx(dict(span=1.31, work=1.1, sync=0.21, median_work=1.0))
    assert got[WIDE_PHASES[0]] == pytest.approx(dict(span=1.0, work=0.79, sync=0.21, median_work=0.69))
    assert got["LM head"] == pytest.approx(dict(span=0.79, work=0.79, sync=0.0, median_work=0.69))
    assert got["total"] == pytest.approx(8.2) and got["timer step"] == pytest.approx(0.01)
    stamps[:, 4] = 0  # no barrier after B2
    merged = barrier_phases(stamps, 1, **wide)
    assert merged[WIDE_PHASES[2]] == dict(span=0.0, work=0.0, sync=0.0, median_work=0.0)
    assert merged[WIDE_PHASES[3]] == pytest.approx(dict(span=2.0, work=1.79, sync=0.21, median_work=1.69))
    with pytest.raises(ValueError, match="9 slots, expected 1 \\+ 6 x 2 \\+ 2"):
        barrier_phases(stamps, 2, **wide)


@needs_cuda
@pytest.mark.parametrize("variant, batch", [("tucker", 32), ("tucker_shared", 32), ("mha", 8), ("gqa", 8),
                                            ("mqa", 32), ("tucker", 8), ("mla_shared", 32), ("mla", 8),
                                            ("tucker_rope", 32), ("mha_rope", 8), ("tucker_shared_rope", 32),
                                            ("mla_latent", 8)])
def test_cuda_wide_one_launch_matches_the_phases_and_the_model(variant, batch):
    """bf16 at GPT-2 widths: the one launch (barriers) against the phases launched one by one (equal up to the
    statistics' order of arrival) and both against the model's step, over three steps from a 1,500-row cache."""
    assert isinstance(check_one_launch(variant, batch), dw.WideDecoder)


@needs_cuda
@pytest.mark.parametrize("variant, batch, dtype, small_sm", [("tucker", 32, torch.bfloat16, True),
                                                              ("tucker_shared", 8, torch.float32, False),
                                                              ("mha", 8, torch.float32, False)])
def test_cuda_wide_step_at_one_program_an_sm(variant, batch, dtype, small_sm, monkeypatch):
    """Where an SM's shared memory holds one program the step runs one an SM (every program resident: the barriers
    complete), matching the model and its phases: bf16 on a GPU of 100 KB an SM (this GPU answering as one,
    through decode_attention.shared_memory), fp32 weights on this one (120 KB a program at batch 8)."""
    if small_sm:
        monkeypatch.setattr(dw, "shared_memory", lambda device: SM86_SHARED)
    elif dw.shared_memory(torch.device("cuda"))[0] < 120 * 1024:  # a GPU of 100 KB an SM: refused by name there
        pytest.skip("fp32 weights' 120 KB a program exceed what this GPU gives one program "
                    "(test_programs_an_sm_follow_its_shared_memory)")
    mega = check_one_launch(variant, batch, dtype)
    assert isinstance(mega, dw.WideDecoder) and mega._check_fits() == 1
    assert mega.programs == torch.cuda.get_device_properties(0).multi_processor_count


@pytest.mark.parametrize("variant", ["tucker_8_64_64", "tucker_shared_8_64_64"])
def test_sass_two_programs_fit_an_sm(variant, tmp_path):
    """scripts/mega_sass at MAX_ROWS (decode_wide's kernel as the launcher compiles it for sm_90, then ptxas): no
    spills at PROGRAMS_PER_SM x NUM_WARPS = 2 x 4 (at most 255 registers a thread), two programs' shared memory (the
    pipelined stages of the largest loop, 1 KB reserved a program) within an SM's 228 KB, the products on tensor
    cores (HMMA) fed by asynchronous copies (LDGSTS: the loops are software-pipelined)."""
    import triton
    from pathlib import Path
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    if not (tools / "nvdisasm").exists() or not (tools / "ptxas").exists():
        pytest.skip("Triton's wheel has no ptxas / nvdisasm here")
    from scripts import mega_sass
    r = mega_sass.compile_step(variant, tmp_path, batch=dw.MAX_ROWS)  # the widest row tile (BLOCK_M 32)
    assert r["stack"] == 0 and r["registers"] <= 255
    assert dw.PROGRAMS_PER_SM * (r["shared"] + 1024) <= 228 * 1024
    assert r["hmma"] > 0 and r["ldgsts"] > 0 and r["timer_reads"] == 0
    if variant == "tucker_8_64_64":  # the timed step's compile: every barrier and the start and end stamped
        timed = mega_sass.compile_step(variant, tmp_path / "timed", batch=dw.MAX_ROWS, timed=True)
        assert timed["timer_reads"] > 0 and dw.PROGRAMS_PER_SM * (timed["shared"] + 1024) <= 228 * 1024


@needs_cuda
def test_cuda_wide_timed_step_stamps_every_barrier_in_order():
    """timed_step at batch 8: the same logits as an untimed step; every program's stamps rise through the step,
    no program is released before the last one arrived (the global timer across programs), every slot is stamped
    (B2's barrier too), and each SM holds PROGRAMS_PER_SM programs (fewer where its shared memory holds fewer)."""
    over = dict(n_layer=2, n_head=12, n_embd=768, block_size=2048, vocab_size=50304, tucker_ranks=(8, 64, 64))
    model = tiny("tucker", dtype=torch.bfloat16, device="cuda", **over)
    caches = model.new_caches(8, 1024, device="cuda")
    mega = dm.step_decoder(model, caches)
    tok, pos = torch.full((8, 1), 5, device="cuda"), torch.tensor([700], device="cuda")
    plain = mega.decode_step(tok, caches, pos).float().clone()
    stamps = mega.timed_step(tok, caches, pos)
    mega.check()
    assert ((mega.logits.float() - plain).norm() / plain.norm()).item() < 1e-2
    assert stamps.shape == (mega.programs, 6 * 2 + 3, 4) and mega.times is None
    assert stamps[:, :, 0].ne(0).all()  # every slot stamped (B2 a phase: its barrier too)
    for col in (0, 1):  # ns, cycles
        seq = torch.cat([stamps[:, :1, col], stamps[:, 1:-1, [col, col + 2]].reshape(mega.programs, -1),
                         stamps[:, -1:, col]], dim=1)
        assert (seq[:, 1:] >= seq[:, :-1]).all()
    assert (stamps[:, 1:-1, 2] >= stamps[:, 1:-1, 0].max(dim=0).values).all()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    per_sm = min(dw.PROGRAMS_PER_SM, mega._check_fits())  # one on a GPU of 100 KB an SM
    assert mega.programs == sms * per_sm
    assert torch.bincount(stamps[:, 0, 2], minlength=sms).tolist() == [per_sm] * sms

"""scripts/convert.py and scripts/spectrum.py: structured mode SVDs against explicit unfoldings,
exact conversions at full rank, monotone HOSVD errors, the checkpoint train.py and sample.py read,
the Hugging Face GPT-2 loader."""
import json
import math
import os

import numpy as np
import pytest
import torch

from scripts import convert as cv
from scripts import spectrum
from tensor_forms import attention_tensors, tucker_tensor
from tiny import TINY, make, one_line_error, rel_err, tokens

D, NH = TINY["n_embd"], TINY["n_head"]
TUCKER_SEP = dict(attn="tucker", tucker_ranks=(3, 12, 10), tucker_ranks_post=(2, 10, 6))
TUCKER_SHARED = dict(attn="tucker", tucker_ranks=(3, 12, 10), shared_kv=True)
VARIANTS = [
    dict(attn="mha"),
    dict(attn="gqa", n_kv_head=2),
    dict(attn="mla", q_rank=12, kv_rank=10),
    dict(attn="mla", kv_rank=10, shared_kv=True),
    dict(attn="mla", q_rank=12, kv_rank=10, pos_emb="rope", rope_head_dim=4),  # decoupled: semantic part
    TUCKER_SEP,
    TUCKER_SHARED,
]
IDS = ["mha", "gqa2", "mla_sep", "mla_shared_fullq", "mla_decoupled", "tucker_sep", "tucker_shared"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny matrices: one thread is ~40x faster than several threads fighting over busy cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def unfold(T, mode):
    """Mat_mode of T (nH, d, d), explicitly."""
    order = {1: (0, 1, 2), 2: (1, 0, 2), 3: (2, 0, 1)}[mode]
    return T.permute(*order).reshape(T.shape[mode - 1], -1)


def save_train_ckpt(model, out_dir):
    """A checkpoint as train.py writes it (float32 weights, the keys its resume path reads)."""
    os.makedirs(out_dir, exist_ok=True)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "model_config": model.config.to_dict(),
                "config": {"seed": 1337}, "iter_num": 100, "best_val_loss": 3.0, "best_iter": 100, "bad_evals": 0,
                "sampler_state": torch.Generator().manual_seed(1).get_state()}, os.path.join(out_dir, "ckpt.pt"))


def write_data(data_dir, n=4000, seed=0):
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split in ("train", "val"):
        rng.integers(0, TINY["vocab_size"], n).astype(np.uint16).tofile(os.path.join(data_dir, f"{split}.bin"))


# ---------------------------------------------------------------------------------------
# Structured tensors and spectra


@pytest.mark.parametrize("overrides", VARIANTS, ids=IDS)
def test_structured_spectra_equal_direct_svd(overrides):
    """The factored form is attention_tensors' W and W~, and its mode SVDs (exact path and the
    nH x nH Gram path of mode 1) are the SVDs of the explicit unfoldings."""
    attn = make(overrides).transformer.h[0].attn
    for T, f in zip(attention_tensors(attn), cv.factored_tensors(attn)):
        assert rel_err(f.dense(), T) < 1e-13
        assert f.norm() == pytest.approx(T.norm().item(), rel=1e-12)
        for mode in (1, 2, 3):
            M = unfold(T, mode)
            U_ref, S_ref, _ = torch.linalg.svd(M, full_matrices=False)
            S, U = cv.mode_svd(f, mode, rank=2)
            assert S.shape == S_ref.shape
            assert (S - S_ref).abs().max() < 1e-12 * S_ref[0]
            # leading singular vectors agree up to sign (random weights: distinct singular values)
            assert torch.allclose((U * U_ref[:, :2]).sum(0).abs(), torch.ones(2, dtype=U.dtype), atol=1e-8)
            if mode == 1:  # the Gram path (large models) resolves values down to ~1e-8 of the largest
                S_gram, U_gram = cv.mode_svd(f, 1, rank=2, dense_limit=0)
                assert (S_gram - S_ref).abs().max() < 1e-6 * S_ref[0]
                # and its leading vectors (the ones a conversion keeps), not only the values
                assert torch.allclose((U_gram * U_ref[:, :2]).sum(0).abs(), torch.ones(2, dtype=U.dtype), atol=1e-8)


def test_mode_vectors_past_the_tensors_rank_complete_an_orthonormal_basis():
    """A Tucker layer's W has rank r2 = 12 in mode 2 and r3 = 10 in mode 3: asked for all d vectors, mode_svd gives
    an orthonormal basis of R^d whose leading r_j span Mat_j's column space (the rest: its complement)."""
    attn = make(TUCKER_SEP).transformer.h[0].attn
    f = cv.factored_tensors(attn)[0]
    W = attention_tensors(attn)[0]
    for mode, r in ((2, 12), (3, 10)):
        U = cv.mode_svd(f, mode, rank=D)[1]
        assert U.shape == (D, D)
        assert torch.allclose(U.t() @ U, torch.eye(D, dtype=U.dtype), atol=1e-12)
        assert torch.allclose(U[:, :r] @ U[:, :r].t(), leading_projector(unfold(W, mode), r), atol=1e-10)


def test_head_mode_takes_the_exact_svd_up_to_the_dense_limit_inclusive():
    """Mode 1 is an exact SVD while its core has at most dense_limit entries (nH d d for MHA, the limit included),
    resolving a singular value ~1e-10 of the largest; past it the nH x nH Gram matrix cannot (sqrt of float64 eps ~
    1e-8)."""
    W = cv.factored_tensors(make().transformer.h[0].attn)[0]
    a, b = W.a.clone(), W.b.clone()
    a[-1], b[-1] = a[0], b[0] + 1e-10 * b[-1]  # the last head ~ the first: T_last = T_0 + 1e-10 a_0 b_last^T
    f = cv.Factored(a, b)
    S_ref = torch.linalg.svdvals(unfold(f.dense(), 1))
    assert S_ref[-1] < 1e-9 * S_ref[0]
    entries = NH * D * D
    S = cv.mode_svd(f, 1, dense_limit=entries)[0]
    assert S[-1] == pytest.approx(S_ref[-1].item(), rel=1e-4)
    S_gram = cv.mode_svd(f, 1, dense_limit=entries - 1)[0]
    assert S_gram[-1] != pytest.approx(S_ref[-1].item(), rel=1e-2)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("overrides", [TUCKER_SEP, TUCKER_SHARED], ids=["separated", "shared"])
def test_tucker_spectra_have_exactly_the_ranks(overrides, dtype):
    """Every mode's spectrum has exactly the rank's values above float64 noise, for a float32 checkpoint too (train.py
    saves float32: its head cores formed in float32 gave the head mode values at ~1e-8 past r1)."""
    model = make(overrides, dtype=dtype)
    spectra = spectrum.attention_spectra(model)
    c = model.config
    for name, ranks in (("pre", c.tucker_ranks), ("post", c.tucker_ranks_post)):
        for mode, r in zip((1, 2, 3), ranks):
            for S in spectra[name][f"mode{mode}"]:
                assert S.shape == ((NH,) if mode == 1 else (D,))
                assert S[0] == pytest.approx(1.0) and (np.diff(S) <= 1e-15).all()
                assert (S > 1e-12).sum() == r, (name, mode)


# ---------------------------------------------------------------------------------------
# Conversions


@pytest.mark.parametrize("shared_kv", [False, True], ids=["separated", "shared"])
@pytest.mark.parametrize("source", [dict(attn="mha"), dict(attn="gqa", n_kv_head=2)], ids=["mha", "gqa2"])
def test_tucker_at_full_ranks_is_exact(source, shared_kv):
    model = make(source)
    tucker, layers = cv.convert(model, "tucker", ranks=(NH, D, D), shared_kv=shared_kv)
    assert tucker.config.attn == "tucker" and tucker.config.shared_kv == shared_kv
    for a, b, info in zip(model.transformer.h, tucker.transformer.h, layers):
        for T_src, T_new in zip(attention_tensors(a.attn), attention_tensors(b.attn)):
            assert rel_err(T_new, T_src) < 1e-10
        assert info["W_rel_err"] < 1e-10 and info["Wt_rel_err"] < 1e-10  # the structured errors too
        at = b.attn  # HOSVD factors are orthonormal
        for U in (at.U1, at.U2, at.U3, at.U1_post, at.U2_post):
            assert torch.allclose(U.t() @ U, torch.eye(U.size(1), dtype=U.dtype), atol=1e-12)
    idx = tokens()
    assert rel_err(tucker(idx)[0], model(idx)[0]) < 1e-10


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("ranks", [(NH, D, D), (2, 8, 8)], ids=["full", "truncated"])
def test_a_16_bit_source_reports_the_stored_factors_error(dtype, ranks):
    """A bf16 / fp16 source: beside the float64 factors' error (~1e-15 at full ranks), the error of the factors as
    the converted model stores them, rounded to its dtype: equal to the explicit |W' - W| / |W| of the stored
    model's weights (both models taken to float64 first), ~1e-3 at full ranks in bf16; float32 sources report
    none (their rounding is ~1e-7, below every truncation)."""
    model = make(dtype=dtype)
    tucker, layers = cv.convert(model, "tucker", ranks=ranks)
    src64, out64 = make(dtype=dtype).double(), tucker.double()  # the stored values, exactly
    for a, b, info in zip(src64.transformer.h, out64.transformer.h, layers):
        for key, T_src, T_new in zip(("W_rel_err_stored", "Wt_rel_err_stored"), attention_tensors(a.attn),
                                     attention_tensors(b.attn)):
            assert info[key] == pytest.approx(rel_err(T_new, T_src), rel=1e-6)
        if ranks == (NH, D, D):
            assert info["W_rel_err"] < 1e-12 and 1e-5 < info["W_rel_err_stored"] < 1e-2
    assert "W_rel_err_stored" not in cv.convert(make(dtype=torch.float32), "tucker", ranks=ranks)[1][0]


def test_hosvd_error_is_monotone_in_each_rank_and_matches_explicit():
    model = make()
    W, Wt = attention_tensors(model.transformer.h[0].attn)
    base = (2, 8, 8)
    for mode in range(3):
        errors = []
        for r in (2, 4, 8, 16, 32) if mode else (1, 2, 3, 4):
            ranks = list(base)
            ranks[mode] = r
            tucker, layers = cv.convert(model, "tucker", ranks=tuple(ranks))
            at = tucker.transformer.h[0].attn
            explicit = rel_err(tucker_tensor(at.core, at.U1, at.U2, at.U3), W)
            explicit_post = rel_err(tucker_tensor(at.core_post, at.U1_post, at.U2_post, at.U3_post), Wt)
            assert layers[0]["W_rel_err"] == pytest.approx(explicit, rel=1e-8)
            assert layers[0]["Wt_rel_err"] == pytest.approx(explicit_post, rel=1e-8)
            errors.append((explicit, explicit_post))
        for (e, ep), (e2, ep2) in zip(errors, errors[1:]):
            assert e2 <= e + 1e-12 and ep2 <= ep + 1e-12, (mode, errors)
    # shared KV: the U3 basis grows too
    errs = [cv.convert(model, "tucker", ranks=(4, 16, r), shared_kv=True)[1][0] for r in (4, 8, 16, 32)]
    for a, b in zip(errs, errs[1:]):
        assert b["W_rel_err"] <= a["W_rel_err"] + 1e-12 and b["Wt_rel_err"] <= a["Wt_rel_err"] + 1e-12


def leading_projector(M, r):
    """U_r U_r^T of the r leading left singular vectors of M."""
    U = torch.linalg.svd(M, full_matrices=False)[0][:, :r]
    return U @ U.t()


@pytest.mark.parametrize("shared_kv", [False, True], ids=["separated", "shared"])
def test_truncated_tucker_factors_span_the_leading_singular_subspaces(shared_kv):
    """At truncated ranks (the post-softmax ones given apart) every U_j of W and U~_j of W~ spans the leading left
    singular subspace of that tensor's Mat_j; shared KV: U3 = U~3 spans that of [Mat_3(W)/|W|, Mat_3(W~)/|W~|]."""
    model = make()
    ranks, ranks_post = (3, 12, 10), (2, 10, 10 if shared_kv else 6)
    tucker, _ = cv.convert(model, "tucker", ranks=ranks, ranks_post=ranks_post, shared_kv=shared_kv)
    assert tucker.config.tucker_ranks == ranks and tucker.config.tucker_ranks_post == ranks_post
    for a, b in zip(model.transformer.h, tucker.transformer.h):
        W, Wt = attention_tensors(a.attn)
        w = b.attn.per_head_weights()
        for T, suffix, rs in ((W, "", ranks), (Wt, "_post", ranks_post)):
            for mode, r in zip((1, 2, 3), rs):
                U = w[f"U{mode}{suffix}"]
                assert U.shape == (NH if mode == 1 else D, r)
                if not (shared_kv and mode == 3):
                    assert torch.allclose(U @ U.t(), leading_projector(unfold(T, mode), r), atol=1e-10), (suffix, mode)
        if shared_kv:
            both = torch.cat([unfold(W, 3) / W.norm(), unfold(Wt, 3) / Wt.norm()], dim=1)
            assert torch.allclose(w["U3"] @ w["U3"].t(), leading_projector(both, ranks[2]), atol=1e-10)


@pytest.mark.parametrize("kwargs", [
    dict(to="gqa", n_kv_head=NH),
    dict(to="mla", kv_rank=D, q_rank=D),
    dict(to="mla", kv_rank=D, q_rank=D, shared_kv=True),
    dict(to="mla", kv_rank=D),  # full query
], ids=["gqa_all_heads", "mla_sep", "mla_shared", "mla_full_query"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_gqa_and_mla_at_full_rank_reproduce_mha(kwargs, bias):
    model = make(bias=bias)
    if bias:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 1:
                    p.normal_(0.0, 0.3)  # every bias (query, key, value, output, LayerNorm) non-zero
    out, layers = cv.convert(model, **kwargs)
    idx = tokens()
    assert rel_err(out(idx)[0], model(idx)[0]) < 1e-10
    assert all(i["W_rel_err"] < 1e-10 and i["Wt_rel_err"] < 1e-10 for i in layers)


def test_low_rank_choices():
    """GQA keeps heads 0, nH/nG, ... (their key and value biases too); MLA's down-projections are orthonormal U_r
    (the leading left singular subspace of [W_1 | ... | W_nH] of the query, key and value) and the ups are
    U_r^T W; shared KV fits W_UV through the key latent; W_O is kept. The reported errors of W and W~ are the
    explicit |T' - T| / |T| at these truncated ranks."""
    model = make(bias=True)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.normal_(0.0, 0.3)
    w = model.transformer.h[0].attn.per_head_weights()  # W_Q, W_K, W_V (nH, d, dH), W_O (nH, dH, d)

    def check_errors(out, layers):
        for a, b, info in zip(model.transformer.h, out.transformer.h, layers):
            for key, T_src, T_new in zip(("W_rel_err", "Wt_rel_err"), attention_tensors(a.attn), attention_tensors(b.attn)):
                assert info[key] == pytest.approx(rel_err(T_new, T_src), rel=1e-8) and info[key] > 1e-3
    out, layers = cv.convert(model, "gqa", n_kv_head=2)
    check_errors(out, layers)
    gqa = out.transformer.h[0].attn.per_head_weights()
    for name in ("W_K", "W_V", "b_K", "b_V"):
        assert torch.equal(gqa[name], w[name][[0, 2]])  # nH = 4, nG = 2: heads 0 and 2
    assert torch.equal(gqa["W_Q"], w["W_Q"]) and torch.equal(gqa["W_O"], w["W_O"])
    out, layers = cv.convert(model, "mla", kv_rank=8, q_rank=12, shared_kv=True)
    check_errors(out, layers)
    mla = out.transformer.h[0].attn.per_head_weights()
    Dq, Dk = mla["W_DQ"], mla["W_DK"]  # (d, r)
    for down in (Dq, Dk):
        assert torch.allclose(down.t() @ down, torch.eye(down.size(1), dtype=down.dtype), atol=1e-12)
    for down, name, rank in ((Dk, "W_K", 8), (Dq, "W_Q", 12)):  # the leading subspace of [W_1 | ... | W_nH] (d, d)
        assert torch.allclose(down @ down.t(), leading_projector(torch.cat(list(w[name]), dim=1), rank), atol=1e-12)
    out, layers = cv.convert(model, "mla", kv_rank=8, q_rank=12)  # separated: the value latent is W_V's own
    check_errors(out, layers)
    Dv = out.transformer.h[0].attn.per_head_weights()["W_DV"]
    assert torch.allclose(Dv @ Dv.t(), leading_projector(torch.cat(list(w["W_V"]), dim=1), 8), atol=1e-12)
    for i in range(NH):
        assert torch.allclose(mla["W_UK"][i], Dk.t() @ w["W_K"][i], atol=1e-12)
        assert torch.allclose(mla["W_UV"][i], Dk.t() @ w["W_V"][i], atol=1e-12)
        assert torch.allclose(Dq @ mla["W_UQ"][i], Dq @ Dq.t() @ w["W_Q"][i], atol=1e-12)
    assert torch.equal(mla["W_O"], w["W_O"])


@pytest.mark.parametrize("source", [dict(attn="mha"), dict(attn="gqa", n_kv_head=2)], ids=["mha", "gqa2"])
def test_tucker_biases_fold_or_drop(source):
    """Value bias folds into the output bias (a GQA value head's bias into each query head it serves) and key bias
    drops, both exactly; query bias does not."""
    model = make(source, bias=True)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.normal_(0.0, 0.3)
        for block in model.transformer.h:
            block.attn.per_head_weights()["b_Q"].zero_()  # no query bias: the conversion is exact
    idx = tokens()
    tucker, layers = cv.convert(model, "tucker", ranks=(NH, D, D))
    assert rel_err(tucker(idx)[0], model(idx)[0]) < 1e-10 and layers[0]["query_bias_norm"] == 0
    with torch.no_grad():
        model.transformer.h[0].attn.per_head_weights()["b_Q"].normal_(0.0, 0.3)
    tucker, layers = cv.convert(model, "tucker", ranks=(NH, D, D))
    assert layers[0]["query_bias_norm"] > 0 and rel_err(tucker(idx)[0], model(idx)[0]) > 1e-6


def test_val_loss_makes_its_device_current(tmp_path, monkeypatch):
    """val_loss makes its device current before the model runs (make_current: cuda:N, where Triton launches)."""
    seen = []
    monkeypatch.setattr(cv, "make_current", seen.append)
    model = make(attn="mha")
    np.random.default_rng(0).integers(0, model.config.vocab_size, 500).astype(np.uint16).tofile(tmp_path / "val.bin")
    loss = cv.val_loss(model, str(tmp_path), batches=2, batch_size=2, device="cpu")
    assert seen == [torch.device("cpu")] and math.isfinite(loss)


def test_errors_name_the_problem():
    rope = make(pos_emb="rope")
    for kwargs in (dict(to="tucker", ranks=(4, 16, 16)), dict(to="mla", kv_rank=16)):
        with pytest.raises(ValueError, match="allow_rope_change"):
            cv.convert(rope, **kwargs)
    out, _ = cv.convert(rope, "tucker", ranks=(4, 16, 16), allow_rope_change=True)
    assert out.config.pos_emb == "rope" and out.config.attn == "tucker"
    assert cv.convert(rope, "gqa", n_kv_head=2)[0].config.pos_emb == "rope"  # exact for GQA: no flag needed
    with pytest.raises(ValueError, match="MHA"):
        cv.convert(make(TUCKER_SEP), "mla", kv_rank=8)
    with pytest.raises(ValueError, match="shared_kv"):  # GQA has no shared K/V: refused, not ignored
        cv.convert(make(), "gqa", n_kv_head=2, shared_kv=True)
    with pytest.raises(ValueError, match="tucker_ranks"):
        cv.convert(make(), "tucker", ranks=(5, 16, 16))  # r1 > n_head


def test_help_shows_the_examples(capsys):
    """convert's and convert_study's --help ended at the colon that introduces their example commands."""
    from scripts import convert_study
    for main, example in ((cv.main, "python -m scripts.convert --in_dir=out-mha --to=tucker --ranks=8,64,64"),
                          (convert_study.main, "python -m scripts.convert_study \\\n        --mha out-enwiki/runs/")):
        with pytest.raises(SystemExit):
            main(["--help"])
        assert example in capsys.readouterr().out


def test_only_tucker_takes_a_gqa_source():
    """A GQA source converts to Tucker (Theorem B.3) but not to GQA or MLA, whose conversions read MHA's per-head
    keys and values: refused, naming the MHA source they need."""
    gqa = make(dict(attn="gqa", n_kv_head=2))
    for kwargs in (dict(to="gqa", n_kv_head=1), dict(to="mla", kv_rank=8)):
        with pytest.raises(ValueError, match="the source must be an MHA model, got attn='gqa'"):
            cv.convert(gqa, **kwargs)
    assert cv.convert(gqa, "tucker", ranks=(2, 8, 8))[0].config.attn == "tucker"


# ---------------------------------------------------------------------------------------
# Command lines and files


def test_convert_cli_checkpoint_loads_in_sample_and_resumes_in_train(tmp_path):
    from checkpoint import load_model
    model = make().float()
    src, dst, data = tmp_path / "mha", tmp_path / "tucker", tmp_path / "data"
    save_train_ckpt(model, src)
    write_data(data)
    info = cv.main([f"--in_dir={src}", "--to=tucker", "--ranks=3,16,16", "--ranks_post=2,12,16", "--shared_kv",
                    f"--out_dir={dst}", f"--data_dir={data}", "--eval_batches=2", "--batch_size=2",
                    "--weight_decay=0.05", "--beta1=0.8", "--beta2=0.99"])
    loaded = load_model(str(dst))
    expected, _ = cv.convert(model, "tucker", ranks=(3, 16, 16), ranks_post=(2, 12, 16), shared_kv=True)
    idx = tokens()
    with torch.no_grad():
        assert torch.allclose(loaded(idx)[0], expected.float()(idx)[0], rtol=1e-5, atol=1e-6)
    saved = json.loads((dst / "convert.json").read_text())
    assert saved["val_loss_before"] == pytest.approx(info["val_loss_before"])
    # the losses are of the source and of the converted model (the same seeded batches)
    assert saved["val_loss_before"] == pytest.approx(cv.val_loss(model, str(data), 2, 2), rel=1e-6)
    assert saved["val_loss_after"] == pytest.approx(cv.val_loss(loaded, str(data), 2, 2), rel=1e-6)
    assert len(saved["layers"]) == 2 and 0 < saved["layers"][0]["W_rel_err"] < 1
    ckpt = torch.load(dst / "ckpt.pt", map_location="cpu", weights_only=False)
    assert ckpt["iter_num"] == 0 and ckpt["best_val_loss"] == float("inf") and ckpt["model_config"]["shared_kv"]
    assert tuple(ckpt["model_config"]["tucker_ranks_post"]) == (2, 12, 16)
    # the fresh AdamW state carries the given hyperparameters (train.py's resume takes them from it)
    assert ckpt["optimizer"]["param_groups"][0]["weight_decay"] == 0.05
    assert all(tuple(g["betas"]) == (0.8, 0.99) for g in ckpt["optimizer"]["param_groups"])
    # train.py resumes from it unchanged (2 iterations, in this process) and keeps the converted architecture
    import train
    train.main(["--init_from=resume", f"--out_dir={dst}", f"--data_dir={data}", "--device=cpu", "--compile=False",
                "--max_iters=2", "--eval_interval=1", "--eval_iters=1", "--batch_size=2", "--warmup_iters=0",
                "--lr_decay_iters=2"])
    after = torch.load(dst / "ckpt.pt", map_location="cpu", weights_only=False)
    assert after["iter_num"] == 2 and after["model_config"] == ckpt["model_config"]
    assert after["optimizer"]["param_groups"][0]["weight_decay"] == 0.05  # the converted checkpoint's


def test_spectrum_cli_writes_plots_and_json(tmp_path, capsys, monkeypatch):
    replaced = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (replaced.append(os.path.basename(dst)), real_replace(src, dst)))
    save_train_ckpt(make().float(), tmp_path / "mha")
    save_train_ckpt(make(TUCKER_SEP).float(), tmp_path / "tucker")
    out = tmp_path / "spectra"
    data = spectrum.main([str(tmp_path / "mha"), str(tmp_path / "tucker"), "--out", str(out), "--labels", "MHA,Tucker"])
    for name in ("spectrum_pre.png", "spectrum_post.png", "spectrum.json"):
        assert (out / name).stat().st_size > 1000
    saved = json.loads((out / "spectrum.json").read_text())
    assert [c["label"] for c in saved["checkpoints"]] == ["MHA", "Tucker"] == [c["label"] for c in data["checkpoints"]]
    tucker = saved["checkpoints"][1]["spectra"]
    assert len(tucker["pre"]["mode2"]) == 2 and len(tucker["pre"]["mode2"][0]) == D
    assert sum(v > 1e-6 for v in tucker["post"]["mode1"][0]) == 2  # r~1 = 2
    assert not [p for p in out.iterdir() if ".tmp." in p.name]  # written atomically: no temp file left
    assert "spectrum.json" in replaced  # (a temp file renamed onto it)
    # load_results gives back what was written: labels, paths, the spectra to 8 significant digits
    loaded = spectrum.load_results(str(out / "spectrum.json"))
    assert [(r["label"], r["path"]) for r in loaded] == [("MHA", str(tmp_path / "mha")), ("Tucker", str(tmp_path / "tucker"))]
    exact = spectrum.attention_spectra(make(TUCKER_SEP).float())
    for t in spectrum.TENSORS:
        for m in ("mode1", "mode2", "mode3"):
            np.testing.assert_allclose(np.stack(loaded[1]["spectra"][t][m]), np.stack(exact[t][m]), rtol=1e-7, atol=1e-12)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit):
        spectrum.main([str(tmp_path / "mha"), "--out", str(tmp_path / "a_file")])  # one line, exit 2
    err = one_line_error(lambda: spectrum.main([str(tmp_path / "mha"), str(tmp_path / "tucker"), "--out", str(out),
                                                "--labels", "MHA"]), capsys)  # not one label per checkpoint
    assert "1 labels for 2 checkpoints" in err
    err = one_line_error(lambda: spectrum.main([str(tmp_path / "missing"), "--out", str(out)]), capsys)
    assert "missing" in err, err


def test_spectrum_without_out_leaves_the_committed_spectra_alone(tmp_path, monkeypatch):
    """`python -m scripts.spectrum RUN` without --out writes into out-spectra/, not over results/spectra (the
    committed study's figures and spectrum.json, which it silently replaced)."""
    save_train_ckpt(make().float(), tmp_path / "mha")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(spectrum, "plot", lambda results, out_dir: [])  # the figures are the test above's
    spectrum.main([str(tmp_path / "mha")])
    assert (tmp_path / "out-spectra" / "spectrum.json").is_file()
    assert not (tmp_path / "results").exists()


def test_energy_is_the_share_a_rank_truncation_keeps(tmp_path):
    """energy(s, r) is |M_r|^2 / |M|^2 of the best rank-r approximation M_r of a matrix with singular values s
    (Eckart-Young); write_energy takes each mode's ranks from that mode of the targets, and a Tucker model keeps
    all of its energy exactly at its own ranks, not one rank below."""
    M = torch.randn(6, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    for r in range(7):
        kept = (U[:, :r] * S[:r]) @ Vh[:r]
        assert spectrum.energy(S.numpy(), r) == pytest.approx(((kept.norm() / M.norm()) ** 2).item(), rel=1e-12, abs=1e-15)
    assert spectrum.energy(np.zeros(4), 1) == 1.0  # a zero matrix: any truncation is exact (relative error 0)
    c = make(TUCKER_SEP).config  # pre (3, 12, 10), post (2, 10, 6)
    results = [dict(label="tucker", path="-", model_config=c.to_dict(), spectra=spectrum.attention_spectra(make(TUCKER_SEP)))]
    data = spectrum.write_energy(results, [list(c.tucker_ranks), list(c.tucker_ranks_post)], str(tmp_path))
    assert data["ranks"] == {"mode1": [3, 2], "mode2": [12, 10], "mode3": [10, 6]}
    energy = data["checkpoints"][0]["energy"]
    for name, ranks in (("pre", c.tucker_ranks), ("post", c.tucker_ranks_post)):
        for mode, r in zip((1, 2, 3), ranks):
            assert energy[name][f"mode{mode}"][str(r)] == pytest.approx([1.0] * TINY["n_layer"], abs=1e-12)
    for mode, r in ((1, 2), (2, 10), (3, 6)):  # below W's ranks: less than all of it
        assert all(e < 1 - 1e-6 for e in energy["pre"][f"mode{mode}"][str(r)]), (mode, r)


def test_energy_table_is_each_layers_own_truncation_and_their_mean(tmp_path, monkeypatch):
    """energy.json holds, per tensor, mode and layer, the share of that layer's unfolding a rank-r truncation keeps
    (from its explicit SVD), energy.md's mean row their mean over the layers, both files written atomically; a layer
    whose W is zero has a spectrum of zeros (not NaN) and loses nothing at any rank (energy 1)."""
    from tensor_forms import attention_tensors
    replaced = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (replaced.append(os.path.basename(dst)), real_replace(src, dst)))
    model = make(n_layer=3)
    with torch.no_grad():
        model.transformer.h[2].attn.c_attn.weight[:2 * D].zero_()  # layer 2: no queries or keys, W = 0
    spectra = spectrum.attention_spectra(model)
    assert all((S == 0).all() for m in ("mode1", "mode2", "mode3") for S in spectra["pre"][m][2:])
    ranks = (2, 10, 6)
    data = spectrum.write_energy([dict(label="mha", path="-", model_config={}, spectra=spectra)], [list(ranks)], str(tmp_path))
    table = data["checkpoints"][0]["energy"]
    for i, block in enumerate(model.transformer.h):
        for name, T in zip(spectrum.TENSORS, attention_tensors(block.attn)):
            for mode, r in zip((1, 2, 3), ranks):
                s2 = torch.linalg.svdvals(unfold(T, mode)) ** 2
                kept = (s2[:r].sum() / s2.sum()).item() if s2.sum() > 0 else 1.0
                assert table[name][f"mode{mode}"][str(r)][i] == pytest.approx(kept, rel=1e-9, abs=1e-12), (i, name, mode)
    assert table["pre"]["mode2"]["10"][2] == 1.0
    mean = next(line for line in (tmp_path / "energy.md").read_text().splitlines() if line.startswith("| mean |"))
    cells = [c.strip() for c in mean.strip("| ").split("|")][1:]
    assert cells == [f"{np.mean(table[t][f'mode{m}'][str(r)]):.3f}" for t in spectrum.TENSORS for m, r in zip((1, 2, 3), ranks)]
    assert {"energy.json", "energy.md"} <= set(replaced)


def test_spectrum_figures_draw_each_tensors_own_spectra(tmp_path, monkeypatch):
    """The median line of every panel is the median over layers of that tensor's, that mode's spectra (the W~ figure
    draws W~'s, not W's)."""
    figures = {}
    monkeypatch.setattr(spectrum, "save_figure", lambda fig, path, **kw: figures.__setitem__(os.path.basename(path), fig))
    model = make(TUCKER_SEP)
    results = [dict(label="tucker", path="-", model_config={}, spectra=spectrum.attention_spectra(model))]
    spectrum.plot(results, str(tmp_path))
    for name in spectrum.TENSORS:
        axes = figures[f"spectrum_{name}.png"].axes
        for m in (1, 2, 3):
            S = np.clip(np.stack(results[0]["spectra"][name][f"mode{m}"]), spectrum.FLOOR, None)
            np.testing.assert_allclose(axes[m - 1].lines[0].get_ydata(), np.median(S, axis=0), rtol=1e-12)
    import matplotlib.pyplot as plt
    plt.close("all")


def test_attention_spectra_take_the_dense_limit_given():
    """attention_spectra's dense_limit reaches the head mode: at the default, the exact SVD resolves a head-mode value
    ~1e-10 of the largest (the last head ~ the first); with dense_limit=0 the nH x nH Gram matrix cannot."""
    from tensor_forms import attention_tensors
    model = make()
    attn, hd = model.transformer.h[0].attn, D // NH
    with torch.no_grad():
        q, k = attn.c_attn.weight[:D], attn.c_attn.weight[D:2 * D]  # views: rows of W_Q^T, W_K^T
        q[-hd:] = q[:hd]
        k[-hd:] = k[:hd] + 1e-10 * k[-hd:]
    S_ref = torch.linalg.svdvals(unfold(attention_tensors(attn)[0], 1))
    smallest = (S_ref[-1] / S_ref[0]).item()
    assert smallest < 1e-9
    assert spectrum.attention_spectra(model)["pre"]["mode1"][0][-1] == pytest.approx(smallest, rel=1e-4)
    assert spectrum.attention_spectra(model, dense_limit=0)["pre"]["mode1"][0][-1] != pytest.approx(smallest, rel=1e-2)


# ---------------------------------------------------------------------------------------
# Hugging Face GPT-2


def test_from_hf_gpt2_gives_the_hf_logits():
    transformers = pytest.importorskip("transformers")
    # exact GELU ('gelu'): GPT-2's own 'gelu_new' is the tanh approximation our MLP does not use
    hf_config = transformers.GPT2Config(n_embd=D, n_head=NH, n_layer=2, n_positions=24, vocab_size=61,
                                        activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                        bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(hf_config).double().eval()
    with torch.no_grad():
        for p in hf.parameters():  # every bias and LayerNorm parameter non-trivial
            p.add_(0.1 * torch.randn_like(p))
    ours = cv.from_hf_gpt2(hf)
    idx = tokens()
    with torch.no_grad():
        ref = hf(idx).logits
        assert rel_err(ours(idx)[0], ref) < 1e-10
        padded = cv.from_hf_gpt2(hf, vocab_size=64)
        assert padded.config.vocab_size == 64 and rel_err(padded(idx)[0][..., :61], ref) < 1e-10
    # an untied head (tie_word_embeddings=False): lm_head is its own matrix, copied, not the embedding's
    untied = transformers.GPT2LMHeadModel(transformers.GPT2Config(**{**hf_config.to_dict(), "tie_word_embeddings": False}))
    untied = untied.double().eval()
    with torch.no_grad():
        untied.lm_head.weight.copy_(torch.randn_like(untied.lm_head.weight))
    assert untied.lm_head.weight.data_ptr() != untied.transformer.wte.weight.data_ptr()
    ours = cv.from_hf_gpt2(untied, vocab_size=64)
    assert not ours.config.tie_embeddings
    with torch.no_grad():
        assert rel_err(ours(idx)[0][..., :61], untied(idx).logits) < 1e-10
    with pytest.warns(UserWarning, match="GELU"):
        cv.from_hf_gpt2(transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_embd=D, n_head=NH, n_layer=1, n_positions=8, vocab_size=61, bos_token_id=0, eos_token_id=0)))


def test_from_hf_gpt2_refuses_what_our_gpt_cannot_reproduce():
    """A GPT-2 whose MLP width, attention scaling or LayerNorm epsilon our GPT does not have, or a vocabulary padded
    to fewer tokens than it has, is a ValueError naming the setting (not a model with other logits, or a torch
    error from inside the copy)."""
    transformers = pytest.importorskip("transformers")
    base = dict(n_embd=D, n_head=NH, n_layer=1, n_positions=8, vocab_size=61, activation_function="gelu",
                bos_token_id=0, eos_token_id=0)
    for extra, says in [(dict(n_inner=3 * D), "n_inner"), (dict(scale_attn_by_inverse_layer_idx=True), "scaling"),
                        (dict(scale_attn_weights=False), "scaling"), (dict(layer_norm_epsilon=1e-6), "layer_norm_epsilon")]:
        hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**base, **extra))
        with pytest.raises(ValueError, match=says):
            cv.from_hf_gpt2(hf)
    with pytest.raises(ValueError, match="vocab_size=60 is smaller"):
        cv.from_hf_gpt2(transformers.GPT2LMHeadModel(transformers.GPT2Config(**base)), vocab_size=60)


# ---------------------------------------------------------------------------------------
# The conversion study (scripts/convert_study.py) end to end on tiny CPU checkpoints


def test_convert_study_end_to_end_on_tiny_checkpoints(tmp_path, capsys):
    """The study's command on checkpoints train.py made (MHA learned and RoPE, Tucker for the spectra):
    every (positions, target) row with the converted loss, the loss after 2 fine-tune iterations, the
    from-scratch loss read from a given summary.json; full-rank Tucker exact with learned positions and
    not with RoPE; spectra and energy of MHA, Tucker and a random init; a re-run skips every step."""
    import train
    from scripts import convert_study
    data, runs, scratch = tmp_path / "data", tmp_path / "runs", tmp_path / "scratch"
    write_data(data, n=1200)
    shape = [f"--{k}={v}" for k, v in TINY.items()]
    common = [f"--data_dir={data}", "--device=cpu", "--compile=False", "--dtype=float32", "--max_iters=3",
              "--eval_interval=3", "--eval_iters=1", "--eval_full_val=True", "--batch_size=4", "--warmup_iters=0",
              "--lr_decay_iters=3", "--learning_rate=3e-3", "--min_lr=1e-3", "--log_interval=1", *shape]
    for name, extra in (("mha-rope_off", ["--attn=mha"]), ("mha-rope_on", ["--attn=mha", "--pos_emb=rope"]),
                        ("tucker_2_8_8-rope_off", ["--attn=tucker", "--tucker_ranks=2,8,8"])):
        train.main([*common, f"--out_dir={runs / name}", *extra])
    for row, loss in (("gqa2-rope_off-s1337", 4.25), ("mla_shared_latent8-rope_on-s1337", 3.5)):
        (scratch / row).mkdir(parents=True)
        (scratch / row / "summary.json").write_text(json.dumps({"final_val_loss": loss, "iters": 1300, "finished": True}))
    argv = ["--mha", str(runs / "mha-rope_off"), str(runs / "mha-rope_on"), "--tucker", str(runs / "tucker_2_8_8-rope_off"),
            f"--data_dir={data}", f"--work_dir={tmp_path / 'work'}", f"--results_dir={tmp_path / 'convert'}",
            f"--spectra_dir={tmp_path / 'spectra'}", f"--scratch_dir={scratch}", "--targets", "tucker_2_16_16", "gqa2",
            "mla_shared8", "--finetune_iters", "0", "2", "--finetune_eval_iters=1", "--device=cpu", "--inprocess",
            "--err_windows=2"]
    convert_study.main(argv)
    saved = json.loads((tmp_path / "convert" / "table.json").read_text())
    rows = {(r["positions"], r["target"]): r for r in saved["rows"]}
    targets = ["tucker_2_16_16", "gqa2", "mla_shared8", "tucker_full"]
    assert sorted(rows) == sorted((p, t) for p in ("learned", "rope") for t in targets)
    assert saved["setup"]["finetune"]["lr"] == pytest.approx(1e-3)  # the source run's min_lr, constant
    for (pos, target), r in rows.items():
        assert math.isfinite(r["converted_val_loss"]) and len(r["W_rel_err_layers"]) == TINY["n_layer"]
        if target == "tucker_full":
            assert r["finetune_curve"] == {}
            continue
        assert r["finetune_finished"] and sorted(r["finetune_curve"]) == ["0", "2"]
        # train.py's iteration-0 evaluation of the converted checkpoint is the study's own evaluation
        assert r["finetune_curve"]["0"] == pytest.approx(r["converted_val_loss"], rel=1e-5)
        assert r["finetuned_val_loss"]["2"] == r["finetune_curve"]["2"] != r["converted_val_loss"]
        assert list(r["finetuned_val_loss"]) == ["2"]  # the fine-tuned lengths: 0 is the converted column
        log = (tmp_path / "work" / pos / target / "finetune" / "log.jsonl").read_text()
        assert all(json.loads(line)["lr"] == pytest.approx(1e-3) for line in log.splitlines())
    # the rows' W / W~ errors are the conversion's own, per layer, and their means
    from checkpoint import load_checkpoint
    source = load_checkpoint(str(runs / "mha-rope_off"))[0].float()
    _, layers = cv.convert(source, **convert_study.target_kwargs("tucker_2_16_16", source.config))
    r = rows[("learned", "tucker_2_16_16")]
    for key in ("W_rel_err", "Wt_rel_err"):
        assert r[f"{key}_layers"] == pytest.approx([info[key] for info in layers], rel=1e-9)
        assert r[f"{key}_mean"] == pytest.approx(sum(r[f"{key}_layers"]) / TINY["n_layer"], rel=1e-12)
    learned, rope = rows[("learned", "tucker_full")], rows[("rope", "tucker_full")]
    assert learned["converted_val_loss"] == pytest.approx(learned["source_val_loss_reevaluated"], abs=1e-5)
    assert learned["logit_rel_err"] < 1e-5 and max(learned["attn_out_rel_err_layers"]) < 1e-5
    assert rope["logit_rel_err"] > 1e-3 and rope["attn_out_rel_err_mean"] > 1e-3  # latent RoPE != head-dim RoPE
    assert rows[("learned", "gqa2")]["scratch"] == {"row": "gqa2", "final_val_loss": 4.25, "iters": 1300, "finished": True}
    assert rows[("rope", "mla_shared8")]["scratch"]["row"] == "mla_shared_latent8"
    assert rows[("rope", "gqa2")]["scratch"] is None and rows[("learned", "mla_shared8")]["scratch"] is None
    table = (tmp_path / "convert" / "table.md").read_text()
    assert "| target | attn params | KV/token/layer | converted | +2 it | from scratch |" in table
    gqa_line = next(line for line in table.splitlines() if line.startswith("| gqa2 |"))
    assert f"| {rows[('learned', 'gqa2')]['converted_val_loss']:.3f} |" in gqa_line and "| 4.250 (1300 it) |" in gqa_line
    assert "3.500 (1300 it, mla_shared_latent8)" in table and table.count("not run") == 4  # 4 rows lack a run
    assert (tmp_path / "convert" / "finetune.png").stat().st_size > 1000
    spectra = json.loads((tmp_path / "spectra" / "spectrum.json").read_text())
    assert [c["label"] for c in spectra["checkpoints"]] == ["MHA learned", "MHA rope", "Tucker 2-8-8 learned",
                                                             "random init (MHA)"]
    energy = json.loads((tmp_path / "spectra" / "energy.json").read_text())
    assert energy["ranks"] == {"mode1": [2], "mode2": [16], "mode3": [16]}
    mha_e, tucker_e = (c["energy"]["pre"]["mode2"]["16"] for c in energy["checkpoints"][::2][:2])
    assert all(0 < e < 1 for e in mha_e) and tucker_e == pytest.approx([1.0, 1.0])  # Tucker's r2 = 8 <= 16
    assert "| mean |" in (tmp_path / "spectra" / "energy.md").read_text()
    for png in (tmp_path / "convert" / "finetune.png", tmp_path / "spectra" / "spectrum_pre.png"):
        png.unlink()
    convert_study.main(["--plot_only", f"--results_dir={tmp_path / 'convert'}", f"--spectra_dir={tmp_path / 'spectra'}"])
    assert (tmp_path / "convert" / "finetune.png").stat().st_size > 1000  # redrawn from the JSON files
    assert (tmp_path / "spectra" / "spectrum_pre.png").stat().st_size > 1000
    # a from-scratch run that finished after the study: --scratch_dir refreshes that column from table.json alone
    (scratch / "gqa2-rope_on-s1337").mkdir()
    (scratch / "gqa2-rope_on-s1337" / "summary.json").write_text(json.dumps({"final_val_loss": 4.125, "iters": 1300}))
    convert_study.main(["--plot_only", f"--results_dir={tmp_path / 'convert'}", f"--spectra_dir={tmp_path / 'spectra'}",
                        f"--scratch_dir={scratch}"])
    refreshed = json.loads((tmp_path / "convert" / "table.json").read_text())
    assert {(r["positions"], r["target"]): r for r in refreshed["rows"]}[("rope", "gqa2")]["scratch"]["final_val_loss"] == 4.125
    assert [r["converted_val_loss"] for r in refreshed["rows"]] == [r["converted_val_loss"] for r in saved["rows"]]
    table2 = (tmp_path / "convert" / "table.md").read_text()
    assert "4.125 (1300 it)" in table2 and table2.count("not run") == 3
    assert table2.replace("4.125 (1300 it)", "not run") == table  # the rest of the table is rebuilt exactly
    capsys.readouterr()
    convert_study.main(argv)  # resumable: nothing converted, fine-tuned or recomputed again
    out = capsys.readouterr().out
    assert out.count("skip ") == 2 * 4 + 2 * 3 + 1 and "$ " not in out
    summary = runs / "mha-rope_off" / "summary.json"  # a run cut off mid-way is not a source
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "finished": False}))
    with pytest.raises(SystemExit, match="no MHA checkpoint"):
        convert_study.main(["--mha", str(runs / "mha-rope_off"), *argv[3:]])
    # a target larger than the source (a head rank past its heads): one line before any evaluation or conversion
    # (it was a traceback from inside the conversion, after the source's evaluation and the earlier targets)
    fresh = tmp_path / "work2"
    bad = ["--mha", str(runs / "mha-rope_on"), f"--data_dir={data}", f"--work_dir={fresh}", "--targets", "gqa2",
           f"tucker_{TINY['n_head'] + 1}_8_8", "--device=cpu", "--inprocess", "--no-full_rank_check", "--spectra_dir="]
    with pytest.raises(SystemExit) as e:
        convert_study.main(bad)
    assert str(e.value).startswith(f"error: target tucker_{TINY['n_head'] + 1}_8_8 does not fit the rope source")
    assert not (fresh / "rope").exists()  # nothing evaluated or converted
    # a source with the fixed cosine table: no enwiki rows to compare with (it was tagged 'learned' beside them)
    train.main([*common, f"--out_dir={runs / 'mha-sinusoidal'}", "--attn=mha", "--pos_emb=sinusoidal"])
    with pytest.raises(SystemExit) as e:
        convert_study.main(["--mha", str(runs / "mha-sinusoidal"), *bad[2:]])
    assert "has pos_emb='sinusoidal': the study compares its conversions with the enwiki table's runs" in str(e.value)


def test_study_targets_convert_into_the_rows_they_are_compared_with():
    """A study target's converted attention is that of the table row of the same id, the from-scratch run it is
    compared with (every default target, in the enwiki table; a shared-KV Tucker row, in tab_shake's)."""
    from model import GPTConfig
    from scripts import convert_study, paper_tables as pt
    keys = ("attn", "n_kv_head", "kv_rank", "q_rank", "shared_kv", "tucker_ranks", "tucker_ranks_post")

    def attention(config: dict):
        return {**{k: config[k] for k in keys}, "tucker_ranks_post": config["tucker_ranks_post"] or config["tucker_ranks"]}
    for table, ids in (("enwiki", convert_study.TARGETS), ("shakespeare", ["tucker_shared_4_32_32"])):
        rows = pt.TABLES[table]
        source = GPTConfig(**pt.build_config(rows.row("mha"), "off"))
        for row_id in ids:
            kwargs = convert_study.target_kwargs(row_id, source)
            converted = cv.target_config(source, **kwargs).to_dict()
            assert attention(converted) == attention(pt.build_config(rows.row(row_id), "off")), row_id


def test_output_errors_feed_each_layer_the_source_residual_stream():
    """The study's attention-output error of layer l is that of the converted layer against the source's, both fed
    ln_1 of the residual stream the source itself computes there; the logit error is the whole models'."""
    from scripts.convert_study import output_errors
    source = make()
    converted = cv.convert(source, "tucker", ranks=(2, 8, 8))[0]
    seen = []  # the input of every source attention layer in the source's own forward
    hooks = [b.attn.register_forward_hook(lambda m, args, out: seen.append(args[0].clone())) for b in source.transformer.h]
    idx = tokens()
    with torch.no_grad():
        logits = source(idx)[0]
        for h in hooks:
            h.remove()
        errors = output_errors(source, converted, idx)
        expected = [rel_err(bc.attn(h, None), bs.attn(h, None))
                    for h, bs, bc in zip(seen, source.transformer.h, converted.transformer.h)]
        assert errors["logit_rel_err"] == pytest.approx(rel_err(converted(idx)[0], logits), rel=1e-9)
    assert len(expected) == TINY["n_layer"] and min(expected) > 1e-3
    assert errors["attn_out_rel_err_layers"] == pytest.approx(expected, rel=1e-9)
    assert errors["attn_out_rel_err_mean"] == pytest.approx(sum(expected) / len(expected), rel=1e-9)


def test_study_scratch_column_takes_the_latent_rope_mla_row_first(tmp_path):
    """RoPE MLA targets are compared with the latent-RoPE row where it ran (the conversion gives latent RoPE), the
    decoupled-RoPE row only without it; learned positions: the row itself."""
    from scripts.convert_study import scratch_of
    for row, rope, loss in (("mla_shared8", "on", 3.75), ("mla_shared_latent8", "on", 3.5), ("mla_shared8", "off", 3.25)):
        (tmp_path / f"{row}-rope_{rope}-s7").mkdir()
        (tmp_path / f"{row}-rope_{rope}-s7" / "summary.json").write_text(json.dumps({"final_val_loss": loss, "iters": 9}))
    assert scratch_of("mla_shared8", "on", tmp_path, 7)["row"] == "mla_shared_latent8"
    assert scratch_of("mla_shared8", "off", tmp_path, 7)["final_val_loss"] == 3.25
    (tmp_path / "mla_shared_latent8-rope_on-s7" / "summary.json").write_text(json.dumps({"iters": 3}))  # no loss yet
    assert scratch_of("mla_shared8", "on", tmp_path, 7)["row"] == "mla_shared8"
    (tmp_path / "mla_shared_latent8-rope_on-s7" / "summary.json").unlink()
    assert scratch_of("mla_shared8", "on", tmp_path, 7)["row"] == "mla_shared8"


def study_args(tmp_path, **overrides):
    """Study's arguments (the command line's defaults where a test does not care), on the CPU."""
    from types import SimpleNamespace
    return SimpleNamespace(**{**dict(work_dir=str(tmp_path / "work"), device="cpu", gpus="", finetune_iters=[0, 4, 8],
                                     finetune_lr=None, finetune_eval_iters=1, batch_size=None, compile=False,
                                     data_dir=str(tmp_path / "data"), allow_unfinished=False, dtype="", eval_batch_size=8,
                                     time_budget=0, inprocess=True), **overrides})


def test_study_finetune_runs_at_a_constant_rate(tmp_path):
    """The fine-tune's learning rate, as train.py resolves it on resume (the source run's own keys where the
    command does not give them), is the source's min_lr at every iteration: no warmup, no decay."""
    import configurator
    import train
    from scripts.convert_study import Study
    from train_config import RUN_KEYS
    source_cfg = dict(learning_rate=6e-4, min_lr=6e-5, warmup_iters=100, lr_decay_iters=5000, decay_lr=True)
    study = Study(study_args(tmp_path))
    argv = study.finetune_argv(dict(cfg=source_cfg, dtype="float32"), tmp_path / "ft", "cpu")
    given = set()
    cfg = configurator.parse_config(argv, train.DEFAULTS, given)
    cfg.update({k: v for k, v in source_cfg.items() if k in RUN_KEYS and k not in given})
    assert cfg["max_iters"] == 8 and cfg["eval_interval"] == 4
    assert [train.get_lr(it, cfg) for it in range(cfg["max_iters"] + 1)] == [6e-5] * 9


def test_study_redoes_a_source_whose_checkpoint_changed(tmp_path):
    """A source re-evaluates, and its earlier conversions go, when its ckpt.pt is newer than the work made from it;
    an unchanged one reuses its evaluation."""
    from scripts.convert_study import Study
    src = tmp_path / "mha"
    save_train_ckpt(make().float(), src)
    (src / "summary.json").write_text(json.dumps({"finished": True, "final_val_loss": 4.0}))
    write_data(tmp_path / "data", n=400)
    study = Study(study_args(tmp_path))
    first = study.load_source(str(src))["val_loss_reevaluated"]
    stale = tmp_path / "work" / "learned" / "gqa2" / "convert"
    stale.mkdir(parents=True)
    assert study.load_source(str(src))["val_loss_reevaluated"] == first and stale.exists()  # unchanged: reused
    save_train_ckpt(make(seed=1).float(), src)  # a new checkpoint (newer mtime)
    os.utime(src / "ckpt.pt", (os.path.getmtime(src / "ckpt.pt") + 10,) * 2)
    again = study.load_source(str(src))["val_loss_reevaluated"]
    assert not stale.exists() and again != first
    # the checkpoint file itself given: its run's summary.json is the one beside it (it had been looked for under
    # the file, so a finished run was skipped as unfinished)
    assert study.load_source(str(src / "ckpt.pt"))["val_loss_reevaluated"] == again


def finished_source(tmp_path, summary_config=None):
    """A finished tiny MHA run's folder (train.py's checkpoint, its summary.json with `summary_config` as the run's
    resolved keys) and 400 tokens of val data beside it."""
    src = tmp_path / "mha"
    save_train_ckpt(make().float(), src)  # the checkpoint's own config: seed 1337
    (src / "summary.json").write_text(json.dumps({"finished": True, "final_val_loss": 4.0, "config": summary_config or {}}))
    write_data(tmp_path / "data", n=400)
    return src


def test_study_measures_a_conversion_against_its_source_on_the_first_val_windows(tmp_path):
    """eval.json's errors are those of the converted model against its source on the first err_windows val windows,
    one after another (the source's denominators); the checkpoint a fine-tune starts from takes the run's resolved
    keys (its summary.json's over the checkpoint's), and a CPU study evaluates in float32 whatever the run trained in."""
    from scripts.convert_study import Study, target_kwargs
    src_dir = finished_source(tmp_path, dict(seed=7, weight_decay=0.05, dtype="bfloat16"))
    study = Study(study_args(tmp_path, err_windows=2))
    src = study.load_source(str(src_dir))
    assert src["cfg"]["seed"] == 7 and src["dtype"] == "float32"
    ev = study.convert_one(src, "gqa2", finetune=True)
    T = TINY["block_size"]
    val = np.fromfile(tmp_path / "data" / "val.bin", dtype=np.uint16).astype(np.int64)
    idx = torch.from_numpy(val[:2 * T]).view(2, T)
    source = src["model"]
    converted = cv.convert(source, **target_kwargs("gqa2", source.config))[0].float().eval()
    with torch.no_grad():
        logits_src, logits_conv = source(idx)[0].double(), converted(idx)[0].double()
    assert ev["logit_rel_err"] == pytest.approx(rel_err(logits_conv, logits_src), rel=1e-5)
    ckpt = torch.load(tmp_path / "work" / "learned" / "gqa2" / "convert" / "ckpt.pt", map_location="cpu", weights_only=False)
    assert {g["weight_decay"] for g in ckpt["optimizer"]["param_groups"]} == {0.05, 0.0}
    assert ckpt["config"]["seed"] == 7


def test_study_converts_again_only_where_a_fine_tune_needs_the_checkpoint(tmp_path):
    """A conversion evaluated without a fine-tune (no checkpoint written) is converted again when a fine-tune needs its
    checkpoint; one whose fine-tune finished is not, its checkpoint gone or not."""
    from scripts.convert_study import Study
    study = Study(study_args(tmp_path, err_windows=1))
    src = study.load_source(str(finished_source(tmp_path)))
    conv = tmp_path / "work" / "learned" / "gqa2" / "convert"
    study.convert_one(src, "gqa2", finetune=False)
    assert (conv / "eval.json").exists() and not (conv / "ckpt.pt").exists()
    study.convert_one(src, "gqa2", finetune=True)
    assert (conv / "ckpt.pt").exists()
    (conv / "ckpt.pt").unlink()
    (conv.parent / "finetune").mkdir()
    (conv.parent / "finetune" / "summary.json").write_text(json.dumps({"finished": True}))
    study.convert_one(src, "gqa2", finetune=True)
    assert not (conv / "ckpt.pt").exists()


def test_study_starts_nothing_past_its_time_budget(tmp_path):
    """Past --time_budget no conversion, fine-tune or spectra computation starts: nothing is written."""
    from scripts.convert_study import Study
    study = Study(study_args(tmp_path, time_budget=1.0, err_windows=1, spectra_dir=str(tmp_path / "spectra"),
                             tucker=None, init_seed=1))
    study.t0 -= 2.0  # 2 s into a 1 s budget
    src = dict(tag="learned", path="-", rope="off", model=make().float(), cfg={}, dtype="float32")
    assert study.convert_one(src, "gqa2", finetune=True) is None
    study.finetune(src, "gqa2")
    study.spectra([src], [[2, 8, 8]])
    assert not (tmp_path / "work").exists() and not (tmp_path / "spectra").exists()


def test_study_finetune_redoes_an_unfinished_run_from_scratch(tmp_path):
    """A fine-tune folder of a run that did not finish (cut off) is run again from a clean folder: its curve holds
    none of the earlier run's evaluations, and no checkpoint is left in it (the converted one stays)."""
    from scripts.convert_study import Study, finished, val_curve
    study = Study(study_args(tmp_path, err_windows=1, finetune_iters=[0, 2]))
    src = study.load_source(str(finished_source(tmp_path)))
    study.convert_one(src, "gqa2", finetune=True)
    ft = tmp_path / "work" / "learned" / "gqa2" / "finetune"
    ft.mkdir()
    (ft / "log.jsonl").write_text(json.dumps({"iter": 1, "val_loss": 9.0}) + "\n")
    (ft / "summary.json").write_text(json.dumps({"finished": False}))
    study.finetune(src, "gqa2")
    assert finished(ft) and sorted(val_curve(ft)) == [0, 2]
    assert not (ft / "ckpt.pt").exists() and (ft.parent / "convert" / "ckpt.pt").exists()


def test_study_finetune_keeps_the_source_runs_training_keys(tmp_path):
    """The fine-tune's batch, accumulation, optimizer keys, seed and data are the source run's (a --batch_size given
    wins), it writes no checkpoint, and it runs max(--finetune_iters) iterations evaluated every gcd of them."""
    import configurator
    import train
    from scripts.convert_study import Study
    source_cfg = dict(batch_size=12, gradient_accumulation_steps=3, weight_decay=0.05, beta1=0.8, beta2=0.99,
                      grad_clip=0.5, seed=7, min_lr=1e-4)
    for given_batch, batch in ((None, 12), (5, 5)):
        study = Study(study_args(tmp_path, finetune_iters=[300, 0, 200], batch_size=given_batch))
        cfg = configurator.parse_config(study.finetune_argv(dict(cfg=source_cfg, dtype="float32"), tmp_path / "ft", "cpu"),
                                        train.DEFAULTS, set())
        expected = {**{k: v for k, v in source_cfg.items() if k != "min_lr"}, "batch_size": batch}
        assert {k: cfg[k] for k in expected} == expected
        assert cfg["learning_rate"] == 1e-4 and cfg["save_checkpoint"] is False and cfg["data_dir"] == study.args.data_dir
        assert cfg["max_iters"] == 300 and cfg["eval_interval"] == 100


def no_figures(*args, **kwargs):
    raise ImportError("figures are not under test here")


def test_study_spectra_are_redone_for_other_ranks_or_checkpoints(tmp_path, monkeypatch):
    """The spectra's random initialization is --init_seed's; a re-run skips the spectra only where spectrum.json holds
    the same checkpoints (labels and paths) and energy.json the same ranks: without energy.json, for other target
    ranks or for another source they are computed again."""
    from model import GPT
    from scripts.convert_study import Study
    monkeypatch.setattr(spectrum, "plot", no_figures)
    out = tmp_path / "spectra"
    study = Study(study_args(tmp_path, spectra_dir=str(out), tucker=None, init_seed=5))
    src = dict(tag="learned", path="mha-a", model=make().float())
    study.spectra([src], [[2, 8, 8]])
    torch.manual_seed(5)
    init = spectrum.attention_spectra(GPT(src["model"].config))
    saved = spectrum.load_results(str(out / "spectrum.json"))
    assert [r["label"] for r in saved] == ["MHA learned", "random init (MHA)"]
    for t in spectrum.TENSORS:
        for m in ("mode1", "mode2", "mode3"):
            np.testing.assert_allclose(np.stack(saved[1]["spectra"][t][m]), np.stack(init[t][m]), rtol=1e-7, atol=1e-15)

    def energy_ranks():
        return json.loads((out / "energy.json").read_text())["ranks"]
    (out / "energy.json").unlink()
    study.spectra([src], [[2, 8, 8]])
    assert energy_ranks() == {"mode1": [2], "mode2": [8], "mode3": [8]}
    study.spectra([src], [[4, 16, 16]])  # other targets
    assert energy_ranks() == {"mode1": [4], "mode2": [16], "mode3": [16]}
    study.spectra([dict(src, path="mha-b", model=make(seed=1).float())], [[4, 16, 16]])  # another source
    assert spectrum.load_results(str(out / "spectrum.json"))[0]["path"] == "mha-b"


def test_study_command_takes_each_target_once_and_one_source_per_positions(tmp_path, monkeypatch):
    """tucker_full given in --targets is one row, not two; --finetune_iters 0 fine-tunes nothing (no fine-tune folder,
    no checkpoint written for one); table.json and table.md are written atomically (--plot_only rewrites them in
    place); a second source of the same positions (an unfinished run taken with --allow_unfinished) is refused."""
    from scripts import convert_study
    monkeypatch.setattr(convert_study, "plot_finetune", no_figures)
    replaced = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (replaced.append(os.path.basename(dst)), real_replace(src, dst)))
    src = finished_source(tmp_path)
    argv = ["--mha", str(src), f"--data_dir={tmp_path / 'data'}", f"--work_dir={tmp_path / 'work'}",
            f"--results_dir={tmp_path / 'convert'}", "--spectra_dir=", "--targets", "tucker_full", "gqa2",
            "--finetune_iters", "0", "--device=cpu", "--inprocess", "--err_windows=1"]
    rows = convert_study.main(argv)
    assert [r["target"] for r in rows] == ["tucker_full", "gqa2"]
    assert not list((tmp_path / "work").rglob("finetune")) and not list((tmp_path / "work").rglob("ckpt.pt"))
    assert {"table.json", "table.md"} <= set(replaced)
    save_train_ckpt(make(seed=1).float(), tmp_path / "mha2")
    (tmp_path / "mha2" / "summary.json").write_text(json.dumps({"finished": False}))
    with pytest.raises(SystemExit, match="at most one MHA source per positions setting"):
        convert_study.main(["--mha", str(src), str(tmp_path / "mha2"), "--allow_unfinished", *argv[2:]])


def test_study_evaluates_float32_without_autocast():
    """A float32 evaluation, and any on the CPU, runs without autocast; a 16-bit one on the GPU autocasts to it."""
    import contextlib
    import warnings
    from scripts.convert_study import autocast_for
    cuda = torch.device("cuda")
    assert isinstance(autocast_for(cuda, "float32"), contextlib.nullcontext)
    assert isinstance(autocast_for(torch.device("cpu"), "bfloat16"), contextlib.nullcontext)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA here: the context is built, disabled
        ctx = autocast_for(cuda, "bfloat16")
    assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == torch.bfloat16


def test_study_refuses_a_target_id_with_a_tail():
    """A row id with something after its ranks (a fourth rank, a typo) is an unknown target naming it, not the row
    of its leading part."""
    from scripts.convert_study import target_kwargs
    for bad in ("tucker_2_8_8_4", "tucker_shared_2_8_8x", "gqa2x", "mla_shared8_4"):
        with pytest.raises(ValueError, match=f"unknown target '{bad}'"):
            target_kwargs(bad, make().config)


def convert_error(argv, capsys) -> str:
    return one_line_error(lambda: cv.main(argv), capsys)


def test_convert_checks_every_option_before_converting(tmp_path, capsys, monkeypatch):
    """Options of another target, values out of range, a data folder without val.bin, a bad device, a file as
    out_dir, and an out_dir that holds a run (the source's own folder included) are one line and exit 2, before
    any conversion: no folder is written."""
    src, data = tmp_path / "mha", tmp_path / "data"
    save_train_ckpt(make().float(), src)
    write_data(data)
    (tmp_path / "a_file").write_text("")
    base = [f"--in_dir={src}", f"--out_dir={tmp_path / 'new'}"]
    for extra, says in [(["--to=gqa", "--n_kv_head=2", "--ranks=1,2,3"], "--ranks is an option of --to tucker"),
                        (["--to=gqa", "--n_kv_head=2", "--kv_rank=7"], "--kv_rank is an option of --to mla"),
                        (["--to=tucker", "--ranks=3,16,16", "--n_kv_head=2"], "--n_kv_head is an option of --to gqa"),
                        (["--to=gqa", "--n_kv_head=2", "--vocab_size=3"], "--vocab_size pads"),
                        (["--to=gqa", "--n_kv_head=2", f"--data_dir={data}", "--eval_batches=0"], "--eval_batches=0"),
                        (["--to=gqa", "--n_kv_head=2", f"--data_dir={data}", "--batch_size=0"], "--batch_size=0"),
                        (["--to=gqa", "--n_kv_head=2", f"--data_dir={tmp_path / 'nodata'}"], "has no val.bin"),
                        (["--to=gqa", "--n_kv_head=2", "--device=tpu"], "device"),
                        (["--to=gqa", "--n_kv_head=2", "--ranks_post=1,2,3"], "--ranks_post is an option of --to tucker"),
                        (["--to=mla", "--kv_rank=8", "--ranks_post=1,2,3"], "--ranks_post is an option of --to tucker")]:
        err = convert_error([*base, *extra], capsys)
        assert says in err, err
    assert not (tmp_path / "new").exists()
    # a val.bin too short for the model's windows, or with ids beyond its vocabulary: named before converting,
    # with the conversion never run (it is minutes at GPT-2 size and would be lost to a traceback after it)
    monkeypatch.setattr(cv, "convert", lambda *a, **k: pytest.fail("converted before checking val.bin"))
    for name, ids, says in [("short", np.arange(10), "fewer than block_size + 2"),
                            ("foreign", np.full(500, TINY["vocab_size"] + 5), "vocab")]:
        (tmp_path / name).mkdir()
        ids.astype(np.uint16).tofile(tmp_path / name / "val.bin")
        err = convert_error([*base, "--to=gqa", "--n_kv_head=2", f"--data_dir={tmp_path / name}"], capsys)
        assert "val.bin" in err and says in err, err
    monkeypatch.undo()
    assert not (tmp_path / "new").exists()
    gqa = ["--to=gqa", "--n_kv_head=2"]
    assert "is a file" in convert_error([f"--in_dir={src}", f"--out_dir={tmp_path / 'a_file'}", *gqa], capsys)
    assert "the source's own folder" in convert_error([f"--in_dir={src}", f"--out_dir={src}", *gqa], capsys)
    assert "the source's own folder" in convert_error([f"--in_dir={src / 'ckpt.pt'}", f"--out_dir={src}", *gqa], capsys)
    for held in ("summary.json", "log.jsonl"):  # a run that has not saved a checkpoint yet is a run too
        (tmp_path / held).mkdir()
        (tmp_path / held / held).write_text("{}")
        err = convert_error([f"--in_dir={src}", f"--out_dir={tmp_path / held}", *gqa], capsys)
        assert f"holds a run ({held})" in err, err
    info = cv.main([*base, *gqa, f"--data_dir={data}", "--eval_batches=1", "--batch_size=1"])  # the least allowed
    assert info["eval_batches"] == 1 and info["batch_size"] == 1 and math.isfinite(info["val_loss_after"])
    before = (tmp_path / "new" / "ckpt.pt").read_bytes()
    err = convert_error([*base, "--to=tucker", "--ranks=3,16,16"], capsys)  # the first conversion is kept
    assert "holds a run (ckpt.pt)" in err and (tmp_path / "new" / "ckpt.pt").read_bytes() == before


def test_convert_names_a_missing_or_malformed_target_option(tmp_path, capsys):
    """A target without its required option, rank lists of another length or not integers, and a source folder
    without a checkpoint: one line naming the option (or the path), exit 2, nothing written."""
    src = tmp_path / "mha"
    save_train_ckpt(make().float(), src)
    base = [f"--in_dir={src}", f"--out_dir={tmp_path / 'new'}"]
    for extra, says in [(["--to=gqa"], "--n_kv_head"), (["--to=mla"], "--kv_rank"), (["--to=tucker"], "--ranks"),
                        (["--to=tucker", "--ranks=3,16"], "--ranks='3,16': give 3 comma-separated integers"),
                        (["--to=tucker", "--ranks=3,16,16,2"], "--ranks='3,16,16,2': give 3"),
                        (["--to=tucker", "--ranks=3,x,16"], "--ranks='3,x,16': give 3"),
                        (["--to=tucker", "--ranks=3,16,16", "--ranks_post=2,8"], "--ranks_post='2,8': give 3")]:
        err = convert_error([*base, *extra], capsys)
        assert says in err, err
    err = convert_error([f"--in_dir={tmp_path / 'missing'}", f"--out_dir={tmp_path / 'new'}", "--to=gqa",
                         "--n_kv_head=2"], capsys)
    assert "no checkpoint at" in err, err
    assert not (tmp_path / "new").exists()


def test_allow_rope_change_is_an_option_of_the_targets_that_change_rope(tmp_path, capsys):
    """--allow_rope_change is refused with --to gqa (GQA keeps the source's head-dim RoPE, exactly: the flag would be
    ignored, and the tool then said the RoPE 'became latent RoPE: not exact at any rank'); Tucker still takes it and
    says so."""
    src = tmp_path / "mha_rope"
    save_train_ckpt(make(pos_emb="rope").float(), src)
    err = convert_error([f"--in_dir={src}", f"--out_dir={tmp_path / 'gqa'}", "--to=gqa", "--n_kv_head=2",
                         "--allow_rope_change"], capsys)
    assert "--allow_rope_change is an option of --to mla / tucker, not of --to gqa" in err, err
    assert not (tmp_path / "gqa").exists()
    cv.main([f"--in_dir={src}", f"--out_dir={tmp_path / 'tucker'}", "--to=tucker", "--ranks=2,8,8", "--allow_rope_change"])
    assert "became latent RoPE" in capsys.readouterr().out

"""scripts/bench_rope.py: every RoPE formulation it times computes the model's function (values and
gradients, float64), so its timings compare ways of writing one computation; the CLI runs on the CPU."""
import json

import pytest
import torch

from model import GPT, GPTConfig
from scripts import bench_rope


def run_layer(layer, x, g):
    x = x.clone().requires_grad_(True)
    y = layer(x)
    y.backward(g)
    return y.detach(), x.grad, {n: p.grad.clone() for n, p in layer.named_parameters()}


@pytest.mark.parametrize("formulation", [f for f in bench_rope.FORMULATIONS if f not in ("none", "model")])
def test_formulation_equals_the_model(formulation):
    config = bench_rope.layer_config(tiny=True, block_size=16)
    no_rope = formulation in bench_rope.NO_ROPE  # the no-RoPE ways of writing the sublayer: equal to 'none'
    ref_layer = bench_rope.AttentionLayer(config, "none" if no_rope else "model").double()
    layer = bench_rope.AttentionLayer(config, formulation).double()
    layer.load_state_dict(ref_layer.state_dict())
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 16, config.n_embd, dtype=torch.float64, generator=gen)
    g = torch.randn(2, 16, config.n_embd, dtype=torch.float64, generator=gen)
    y_ref, dx_ref, dw_ref = run_layer(ref_layer, x, g)
    y, dx, dw = run_layer(layer, x, g)
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dx, dx_ref, rtol=1e-12, atol=1e-12)
    for name in dw_ref:
        torch.testing.assert_close(dw[name], dw_ref[name], rtol=1e-12, atol=1e-12)
    if no_rope:
        return
    # and RoPE is there at all: the layer without it computes something else
    none = bench_rope.AttentionLayer(config, "none").double()
    none.load_state_dict(ref_layer.state_dict())
    assert (none(x) - y_ref).abs().max() > 1e-3


def test_model_layer_is_the_gpt_attention():
    """'model' is GroupedQueryAttention.forward itself: the GPT's first block computes the same attention
    from the same weights and tables."""
    config = GPTConfig(n_layer=1, n_head=4, n_embd=32, block_size=16, vocab_size=64, bias=False, pos_emb="rope",
                       dropout=0.0)
    gpt = GPT(config).double()
    layer = bench_rope.AttentionLayer(bench_rope.layer_config(tiny=True, block_size=16), "model").double()
    layer.attn.load_state_dict(gpt.transformer.h[0].attn.state_dict())
    x = torch.randn(2, 16, 32, dtype=torch.float64)
    torch.testing.assert_close(layer(x), gpt.transformer.h[0].attn(x, (gpt.rope_cos, gpt.rope_sin)),
                               rtol=0, atol=0)


def test_cost_is_the_kernels_time_only_from_a_cuda_profile():
    """A row's cost: its kernels' ms per step when profiled on CUDA; else (a CPU profile, none) its wall time."""
    assert bench_rope.cost({"ms": 2.0, "profile": {"source": "cuda", "kernel_ms_per_step": 1.5}}) == 1.5
    assert bench_rope.cost({"ms": 2.0, "profile": {"source": "cpu", "kernel_ms_per_step": 1.5}}) == 2.0
    assert bench_rope.cost({"ms": 2.0}) == 2.0


def test_cli_on_cpu(tmp_path):
    bench_rope.main(["--device", "cpu", "--tiny", "--iters", "1", "--warmup", "0", "--formulations", "none,separate",
                     "--cat", "pointwise,concat", "--out_dir", str(tmp_path)])
    out = json.loads((tmp_path / "bench_rope.json").read_text())
    assert [(r["formulation"], r["cat"]) for r in out["rows"]] == [
        ("none", "pointwise"), ("separate", "pointwise"), ("none", "concat"), ("separate", "concat")]
    assert all(r["ms"] > 0 and "rope_cost_pct" in r for r in out["rows"])
    none_p, sep_p, none_c, sep_c = out["rows"]  # each cost over the 'none' row of its own shape and --cat
    assert none_p["rope_cost_pct"] == 0.0 and none_c["rope_cost_pct"] == 0.0
    assert sep_p["rope_cost_pct"] == pytest.approx(100 * (sep_p["ms"] / none_p["ms"] - 1))
    assert sep_c["rope_cost_pct"] == pytest.approx(100 * (sep_c["ms"] / none_c["ms"] - 1))
    assert "| 2x16 | concat | separate |" in (tmp_path / "bench_rope.md").read_text()
    if not torch.cuda.is_available():  # the default device is the GPU: no silent full-size rows on the CPU
        with pytest.raises(SystemExit, match="^no CUDA device: run with --device cpu --tiny for a smoke test$"):
            bench_rope.main([])
    with pytest.raises(SystemExit, match="--cat"):
        bench_rope.main(["--device", "cpu", "--tiny", "--cat", ","])  # no lowering named: refused, not an empty table
    with pytest.raises(SystemExit, match="unknown"):
        bench_rope.main(["--device", "cpu", "--tiny", "--formulations", "rotary"])
    with pytest.raises(ValueError, match="allowed"):
        bench_rope.cat_lowering("fused")

"""
scripts/bench_train.py and scripts/bench_decode.py on the CPU (--tiny): both run end to end
and write their markdown table and JSON with the expected keys; ratios are taken against MHA
(1.0 for MHA itself); the decode floor equals a hand count; a failing variant is reported in
its row and the rest still run. The GPU numbers themselves are measured on the H200, not here.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench_decode  # noqa: E402
import bench_train  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

TWO = "mha,tucker_8_64_64"
INFO_KEYS = {"command", "argv", "args", "date", "torch", "cuda", "device", "gpu", "git_commit", "rows"}


def run_script(script, *args):
    # one thread: the CPU is shared, and oversubscribed threads make tiny models 30x slower
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, f"scripts/{script}", "--device=cpu", "--tiny", *args],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def check_markdown(md: str, headers, n_rows: int):
    lines = md.splitlines()
    table = [line for line in lines if line.startswith("| ")]
    assert table[0] == "| " + " | ".join(headers) + " |"
    assert set(table[1].replace("|", "").split()) == {"---"}
    assert len(table) == 2 + n_rows  # header, separator, one line per row
    assert any(line.startswith("`python scripts/") for line in lines), "the command line is in the report"


def test_bench_train_tiny(tmp_path):
    proc = run_script("bench_train.py", "--variants", TWO, "--shapes", "2x16,1x8", "--iters", "2",
                      "--out_dir", str(tmp_path))
    md = (tmp_path / "bench_train.md").read_text()
    assert md.strip() in proc.stdout  # the table is printed last
    check_markdown(md, ["variant", "shape", "fwd ms", "bwd ms", "opt ms", "total ms", "time ×MHA", "tokens/s",
                        "MFU %", "peak GiB", "attn params MB", "note"], n_rows=4)
    out = json.loads((tmp_path / "bench_train.json").read_text())
    assert INFO_KEYS <= set(out)
    assert out["command"].startswith("python scripts/bench_train.py") and "--tiny" in out["argv"]
    assert out["args"]["compile"] is False and out["args"]["iters"] == 2
    rows = out["rows"]
    assert [(r["variant"], r["shape"]) for r in rows] == [
        ("mha", "2x16"), ("tucker_8_64_64", "2x16"), ("mha", "1x8"), ("tucker_8_64_64", "1x8")]
    for r in rows:
        assert r["status"] == "ok" and r["error"] is None
        for key in ("fwd_ms", "bwd_ms", "opt_ms", "total_ms", "tokens_per_s", "mfu", "attn_params_mb",
                    "flops_per_token", "total_ms_vs_mha", "first_step_s"):
            assert r[key] > 0, key
        assert r["peak_mem_gib"] is None  # no CUDA allocator on the CPU
        tokens = r["batch_size"] * r["seq_len"]
        assert r["tokens_per_s"] == pytest.approx(tokens / (r["total_ms"] / 1e3))
        assert r["mfu"] == pytest.approx(r["flops_per_token"] * r["tokens_per_s"] / 790e12)
        model = GPT(GPTConfig(**r["config"]))
        assert r["flops_per_token"] == model.flops_per_token(r["seq_len"])
        assert r["attn_params_mb"] == pytest.approx(model.attn_params() * 2 / 1e6)
        if r["variant"] == "mha":
            assert r["total_ms_vs_mha"] == 1.0 and r["tokens_per_s_vs_mha"] == 1.0
        else:
            mha = next(m for m in rows if m["variant"] == "mha" and m["shape"] == r["shape"])
            assert r["total_ms_vs_mha"] == pytest.approx(r["total_ms"] / mha["total_ms"])


def test_bench_decode_tiny(tmp_path):
    proc = run_script("bench_decode.py", "--variants", TWO, "--batches", "1,2", "--contexts", "8,24",
                      "--out_dir", str(tmp_path))
    md = (tmp_path / "bench_decode.md").read_text()
    assert md.strip() in proc.stdout
    check_markdown(md, ["variant", "batch", "context", "ms/token", "tokens/s", "latency ×MHA", "KV cache MB",
                        "weights MB", "floor ms", "floor / latency", "peak GiB", "note"], n_rows=8)
    out = json.loads((tmp_path / "bench_decode.json").read_text())
    assert INFO_KEYS <= set(out)
    assert out["args"]["graphs"] is False and out["args"]["hbm_tbps"] == 4.3
    rows = out["rows"]
    # grouped by (batch, context), variants in the list's order
    assert [(r["batch_size"], r["context"], r["variant"]) for r in rows] == [
        (b, c, v) for b in (1, 2) for c in (8, 24) for v in TWO.split(",")]
    models = {}
    for r in rows:
        assert r["status"] == "ok" and r["error"] is None
        assert r["block_size"] == 24 + 64
        for key in ("latency_ms", "tokens_per_s", "kv_cache_mb", "weight_mb", "floor_ms", "floor_fraction"):
            assert r[key] > 0, key
        if r["variant"] not in models:
            v = bench_train.select_variants(r["variant"])[0]
            models[r["variant"]] = GPT(bench_train.model_config(v, tiny=True, rope=False, block_size=r["block_size"]))
        model = models[r["variant"]]
        assert r["kv_cache_bytes"] == model.kv_cache_bytes(r["context"], r["batch_size"])
        floor = (r["weight_bytes"] + r["kv_cache_bytes"]) / 4.3e12 * 1e3
        assert r["floor_ms"] == pytest.approx(floor)
        assert r["floor_fraction"] == pytest.approx(floor / r["latency_ms"])
        assert r["tokens_per_s"] == pytest.approx(r["batch_size"] / (r["latency_ms"] / 1e3))
        if r["variant"] == "mha":
            assert r["latency_ms_vs_mha"] == 1.0
    # Tucker [8,64,64] separated caches r3 + r~3 = 128 values per token per layer, MHA 2 d = 256
    by = {(r["variant"], r["batch_size"], r["context"]): r for r in rows}
    assert by[("tucker_8_64_64", 2, 24)]["kv_cache_bytes"] == 128 * 2 * 24 * 2 * 2  # values x layers x ctx x B x bf16
    assert by[("mha", 2, 24)]["kv_cache_bytes"] == 256 * 2 * 24 * 2 * 2


def test_floor_by_hand():
    # GQA with one KV head, RoPE (no wpe), d=8, nH=2 (dH=4), one layer, vocab 16, no biases:
    #   wte = lm_head (tied, read once by the lm_head)       16*8        = 128
    #   ln_1, ln_2, ln_f weights                              3*8         = 24
    #   c_attn [W_Q | W_K | W_V]: 8 x (2 + 1 + 1) * 4         8*16        = 128
    #   c_proj 8 x 8                                                       = 64
    #   MLP 8 x 32 and 32 x 8                                 2*256       = 512
    #   total 856 parameters -> 1712 bytes in bf16
    # KV cache: 2 * 1 * 4 = 8 values per token per layer, 5 tokens, batch 3, bf16: 8*5*3*2 = 240 bytes
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=8, vocab_size=16, block_size=8, bias=False,
                    attn="gqa", n_kv_head=1, pos_emb="rope")
    model = GPT(cfg)
    assert bench_decode.weight_bytes_per_step(model) == 1712
    assert model.kv_cache_bytes(5, 3) == 240
    assert bench_decode.memory_floor_ms(1712, 240, 4.3) == pytest.approx((1712 + 240) / 4.3e12 * 1e3)
    # learned positions: the wpe table (8 x 8) is only indexed, so it is not in the bytes read
    learned = GPT(GPTConfig(**{**cfg.to_dict(), "pos_emb": "learned"}))
    assert sum(p.numel() for p in learned.parameters()) == 856 + 64
    assert bench_decode.weight_bytes_per_step(learned) == 1712


def test_failures_are_reported_and_the_rest_runs(tmp_path, monkeypatch):
    """A variant that raises (as an OOM would) gets an error row; the others are still measured."""
    def fake_train(variant, batch_size, seq_len, args, device):
        if variant.id == "gqa2":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 GiB")
        ms = {"mha": 10.0, "tucker_8_64_64": 8.0}[variant.id]
        return dict(fwd_ms=3.0, bwd_ms=6.0, opt_ms=1.0, total_ms=ms, tokens_per_s=batch_size * seq_len / ms * 1e3,
                    mfu=0.5, peak_mem_gib=None, attn_params_mb=1.0)

    monkeypatch.setattr(bench_train, "bench_one", fake_train)
    rows = bench_train.main(["--device=cpu", "--tiny", "--variants", "gqa2,mha,tucker_8_64_64",
                             "--out_dir", str(tmp_path)])
    assert [r["status"] for r in rows] == ["error", "ok", "ok"]
    assert rows[0]["error"].startswith("OutOfMemoryError: CUDA out of memory")
    assert rows[0]["total_ms_vs_mha"] is None
    assert rows[1]["total_ms_vs_mha"] == 1.0 and rows[2]["total_ms_vs_mha"] == pytest.approx(0.8)
    md = (tmp_path / "bench_train.md").read_text()
    assert "OutOfMemoryError: CUDA out of memory" in md

    def fake_decode(model, batch_size, context, args, device):
        if model.config.attn == "tucker" and batch_size == 2:
            raise RuntimeError("No available kernel. Aborting execution.")
        return dict(latency_ms=1.0, tokens_per_s=batch_size * 1e3, kv_cache_bytes=1, kv_cache_mb=1e-6,
                    weight_bytes=1, weight_mb=1e-6, floor_ms=0.5, floor_fraction=0.5, peak_mem_gib=None)

    monkeypatch.setattr(bench_decode, "bench_case", fake_decode)
    rows = bench_decode.main(["--device=cpu", "--tiny", "--variants", TWO, "--contexts", "8",
                              "--out_dir", str(tmp_path)])
    assert [(r["variant"], r["batch_size"], r["status"]) for r in rows] == [
        ("mha", 1, "ok"), ("tucker_8_64_64", 1, "ok"), ("mha", 2, "ok"), ("tucker_8_64_64", 2, "error")]
    assert rows[3]["error"] == "RuntimeError: No available kernel. Aborting execution."
    assert "No available kernel" in (tmp_path / "bench_decode.md").read_text()

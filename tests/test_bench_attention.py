"""scripts/bench_attention: causal attention alone at several score widths. Properties: the FLOP ratios count the
forward's two products and the backward's five at their widths (96/64 over 64/64: 1.25x forward, 1.286x with the
backward); a CPU run writes one row per shape, widths and kernel, the base row at 1.0, every working kernel's output
equal to the math backend's within float32 rounding, a kernel that cannot take a shape a row with its error; bad
--kernels and --dims are refused with the allowed values."""
import json

import pytest

from scripts import bench_attention


def test_flop_ratios_count_each_product_at_its_width():
    fwd, both = bench_attention.flop_ratios((96, 64), (64, 64))
    assert fwd == pytest.approx(160 / 128) and both == pytest.approx((160 + 3 * 96 + 2 * 64) / (128 + 5 * 64))
    assert bench_attention.flop_ratios((64, 64), (64, 64)) == (1.0, 1.0)
    assert bench_attention.flop_ratios((128, 128), (64, 64)) == (2.0, 2.0)  # every product twice as wide


def test_cpu_run_writes_every_row(tmp_path):
    bench_attention.main(["--device", "cpu", "--shapes", "2x32", "--heads", "2", "--dims", "64/64,96/64",
                          "--kernels", "sdpa_auto,sdpa_flash", "--iters", "1", "--repeats", "1",
                          "--out_dir", str(tmp_path), "--name", "a"])
    rows = json.loads((tmp_path / "a.json").read_text())["rows"]
    assert [(r["dqk"], r["kernel"]) for r in rows] == [(64, "sdpa_auto"), (64, "sdpa_flash"), (96, "sdpa_auto"),
                                                      (96, "sdpa_flash")]
    assert rows[0]["fwd_ms_vs_base"] == 1.0 and rows[0]["fwd_bwd_ms_vs_base"] == 1.0
    assert rows[2]["flops_fwd_bwd_vs_base"] == pytest.approx(576 / 448) and rows[2]["fwd_bwd_ms"] > 0
    # the wider scores' times are over the first --dims' base row, beside their FLOP ratio (not over their own)
    assert rows[2]["fwd_bwd_ms_vs_base"] == pytest.approx(rows[2]["fwd_bwd_ms"] / rows[0]["fwd_bwd_ms"])
    for r in rows[:3]:
        assert r["error"] is None and r["err"] < 1e-5  # against the math backend in float32
    assert rows[3]["error"] and rows[3]["fwd_ms"] is None  # flash takes no 96-wide scores beside 64-wide values
    assert "| 2x32 | 96/64 | sdpa_auto |" in (tmp_path / "a.md").read_text()


def test_the_base_row_runs_first_whatever_the_order_given(tmp_path):
    bench_attention.main(["--device", "cpu", "--shapes", "2x16", "--heads", "1", "--dims", "32/32",
                          "--kernels", "sdpa_flash,sdpa_auto", "--iters", "1", "--repeats", "1",
                          "--out_dir", str(tmp_path), "--name", "a"])
    rows = json.loads((tmp_path / "a.json").read_text())["rows"]
    assert [r["kernel"] for r in rows] == ["sdpa_auto", "sdpa_flash"]
    assert rows[1]["fwd_ms_vs_base"] == pytest.approx(rows[1]["fwd_ms"] / rows[0]["fwd_ms"])


@pytest.mark.parametrize("args, message", [(["--kernels", "sdpa_auto,cuda"], "allowed: sdpa_auto"),
                                           (["--dims", "96x64"], "is not QK/V"),
                                           (["--dims", "64/64,0/64"], "head dims must be >= 1"),
                                           (["--dims", "64/0"], "'64/0': head dims must be >= 1"),
                                           (["--shapes", "2x0"], "--shapes 2x0 must be >= 1"),
                                           (["--iters", "0"], "--iters must be >= 1"),
                                           (["--repeats", "0"], "--repeats must be >= 1"),
                                           (["--heads", "0"], "--heads must be >= 1"),
                                           (["--device", "bogus"], "is not a device")])
def test_bad_options_are_refused(args, message):
    with pytest.raises(SystemExit, match=message):
        bench_attention.main(["--device", "cpu", *args])

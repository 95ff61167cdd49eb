"""scripts/bench_sample: its CPU smoke run (the torch form's rows; through Triton's interpreter the kernel's rows too,
each checked to draw the torch form's token) and its argument errors."""
import json

import pytest

from interpreted import needs_child
from scripts import bench_sample


def run(tmp_path, *extra):
    assert bench_sample.main(["--device", "cpu", "--batches", "1,3", "--vocab", "300", "--vocab_limit", "290",
                              "--top_k", "20", "--steps", "1", "--reps", "1", "--out_dir", str(tmp_path), *extra]) == 0
    return json.loads((tmp_path / "bench_sample.json").read_text())["rows"]


def test_cpu_smoke_and_errors(tmp_path):
    rows = run(tmp_path, "--sweep", "")
    cases = [(r["batch"], r["case"]) for r in rows]
    if not any("kernel" in c for _, c in cases):  # the plain CPU: the torch form, greedy and the noise, per batch
        assert cases == [(b, c) for b in (1, 3) for c in ("sample_next, torch form", "sample_next greedy, torch.argmax",
                                                           "exponential_ noise alone")]
    assert all(r["us"] > 0 for r in rows) and "| 3 | sample_next greedy" in (tmp_path / "bench_sample.md").read_text()
    assert bench_sample.parse_sweep("BLOCK=64,128 NUM_WARPS=2") == [("BLOCK", 64), ("BLOCK", 128), ("NUM_WARPS", 2)]
    for bad in ("WARPS=4", "BLOCK=", "BLOCK=a"):
        with pytest.raises(SystemExit, match="--sweep"):
            bench_sample.parse_sweep(bad)
    assert rows[0]["vs_torch"] is None  # the torch form: the base of the ratios
    assert rows[1]["vs_torch"] == pytest.approx(rows[1]["us"] / rows[0]["us"])  # x the torch form's time
    with pytest.raises(SystemExit, match="--vocab_limit 400 exceeds --vocab 300"):
        run(tmp_path, "--vocab_limit", "400")
    assert run(tmp_path, "--sweep", "", "--batches", "1", "--vocab_limit", "300")  # every id kept: allowed
    for flag in ("--steps", "--reps", "--temperature"):
        with pytest.raises(SystemExit, match=f"{flag} must be > 0"):
            run(tmp_path, flag, "0")


@needs_child
def test_interp_bench_rows_draw_the_torch_forms_token(tmp_path):
    rows = run(tmp_path, "--sweep", "BLOCK=64")
    kernel_rows = [r for r in rows if r["same"] is not None]  # per batch and setting: the greedy kernel's, the draw's
    assert [r["knob"] for r in kernel_rows] == [None, None, "BLOCK=64", "BLOCK=64"] * 2
    assert all(r["same"] for r in kernel_rows)
    assert [r["case"] for r in kernel_rows[:2]] == ["sample_next greedy, kernel (defaults: BLOCK=None, NUM_WARPS=4)",
                                                    "sample_next, kernels (defaults: BLOCK=None, NUM_WARPS=4)"]

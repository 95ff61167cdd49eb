"""scripts/plot_train: bench_train's profiled rows as stacked bars. Properties: a bar holds its row's kernel categories
in the fixed order (unknown ones after), then the step's idle where the step is longer than its kernels (none where
the profile sums to more); the ratio is the row's step over the reference variant's step of the same shape and
positions, none without one; unprofiled and failed rows are left out; the figure is written (matplotlib installed),
and a run without a profiled row is refused."""
import json

import pytest

from scripts import plot_train


def row(variant, shape, pos, ms, cats=None, status="ok"):
    profile = None if cats is None else dict(categories={c: dict(ms=v, pct=0.0) for c, v in cats.items()})
    return dict(variant=variant, label=variant.upper(), shape=shape, config=dict(pos_emb=pos), total_ms=ms,
                profile=profile, status=status)


ROWS = [row("mha", "12x1024", "learned", 20.0, {"attention": 3.0, "matmul": 15.0}),
        row("tucker", "12x1024", "learned", 18.0, {"optimizer": 1.0, "matmul": 12.0, "attention": 3.0, "new": 0.5}),
        row("tucker", "12x1024", "rope", 18.5, {"matmul": 19.0}),  # no MHA RoPE row; kernels over the step
        row("gqa4", "12x1024", "learned", 19.0),  # not profiled: no bar
        row("mha", "64x256", "learned", 30.0, {"matmul": 1.0}, status="failed")]  # failed: no bar, no reference


def test_bars_stack_the_categories_in_order_then_the_idle():
    got = plot_train.bars(dict(rows=ROWS))
    assert [b["name"] for b in got] == ["MHA 12x1024", "TUCKER 12x1024", "TUCKER 12x1024 RoPE"]
    assert list(got[0]["parts"].items()) == [("matmul", 15.0), ("attention", 3.0), ("idle", 2.0)]
    assert list(got[1]["parts"].items()) == [("matmul", 12.0), ("attention", 3.0), ("optimizer", 1.0),
                                             ("new", 0.5), ("idle", pytest.approx(1.5))]
    assert list(got[2]["parts"]) == ["matmul"]  # 19 ms of kernels in an 18.5 ms step: no idle
    exact = plot_train.bars(dict(rows=[row("mha", "1x8", "learned", 4.0, {"matmul": 3.0, "attention": 1.0})]))
    assert exact[0]["parts"] == {"matmul": 3.0, "attention": 1.0}  # kernels fill the step: no empty idle segment


def test_ratios_against_the_reference_of_the_same_shape_and_positions():
    got = plot_train.bars(dict(rows=ROWS))
    assert [b["ratio"] for b in got] == [1.0, 18.0 / 20.0, None]  # the RoPE row has no MHA RoPE row to compare with
    got = plot_train.bars(dict(rows=ROWS), ref="tucker")
    assert [b["ratio"] for b in got] == [20.0 / 18.0, 1.0, 1.0]
    # the reference is the run's first variant, profiled or not: a run led by an unprofiled GQA-4 row has no ratios
    # (not ratios against whichever variant happens to be profiled first)
    assert [b["ratio"] for b in plot_train.bars(dict(rows=[ROWS[3], *ROWS[:3]]))] == [None, None, None]
    # a reference row without a profile (or a failed one) is not compared with
    assert [b["ratio"] for b in plot_train.bars(dict(rows=ROWS), ref="gqa4")] == [None, None, None]


def test_the_figure_is_written_and_an_unprofiled_run_refused(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(dict(rows=ROWS, gpu="test GPU", torch="x", args=dict(suite="gpt2"))))
    b.write_text(json.dumps(dict(rows=ROWS[:2])))
    assert plot_train.main([str(a), str(b)]) == 0
    png = tmp_path / "a.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    b.write_text(json.dumps(dict(rows=ROWS[3:])))  # neither row has a usable profile
    assert plot_train.main([str(a), str(b), "--out", str(tmp_path / "none.png")]) == 1
    assert "no profiled row in" in capsys.readouterr().err and not (tmp_path / "none.png").exists()

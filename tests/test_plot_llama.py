"""scripts/plot_llama: the paper's LLaMA-3 1B timing ratios beside ours. Properties: the paper's ratios are its train
iteration times over GQA-8's, in the table's row order (GQA-8 exactly 1, MHA's the table's 5.19 / 4.87); a run's
ratios are its ok rows' iteration ms and FLOPs over its own GQA-8 row's, failed rows left out; a run without an ok
GQA-8 row, of another suite, or that is no JSON object, is refused; the figure is written (matplotlib installed), a
legend entry for every run however many, and the FLOP bars from whichever runs have the rows."""
import json

import pytest

from scripts import plot_llama
from scripts.paper_tables import TABLES


def row(variant, ms, flops, status="ok"):
    return dict(variant=variant, label=variant.upper(), total_ms=ms, flops_per_token=flops, status=status)


RUN = dict(args=dict(suite="llama1b", act_ckpt=True), gpu="NVIDIA H200",
           rows=[row("gqa8", 150.0, 8.0e9), row("tucker_32_64_64", 135.0, 7.2e9), row("mha", 160.0, 8.6e9),
                 row("mqa", 1.0, 1.0, status="failed")])


def test_paper_ratios_follow_the_table():
    got = plot_llama.paper_ratios()
    assert list(got) == [r.id for r in TABLES["llama1b"].rows]
    assert got["gqa8"] == 1.0 and got["mha"] == pytest.approx(5.19 / 4.87)


def test_run_ratios_against_its_own_gqa8_row():
    got = plot_llama.run_ratios(RUN)
    assert set(got) == {"gqa8", "tucker_32_64_64", "mha"}  # the failed row left out
    assert got["tucker_32_64_64"] == dict(time=pytest.approx(0.9), flops=pytest.approx(0.9))
    assert got["mha"]["time"] == pytest.approx(160 / 150) and got["gqa8"] == dict(time=1.0, flops=1.0)
    assert plot_llama.run_ratios(dict(rows=[row("gqa8", 1.0, 1.0, status="failed"), row("mha", 2.0, 2.0)])) is None
    no_count = plot_llama.run_ratios(dict(rows=[row("gqa8", 10.0, 8.0e9), row("mha", 11.0, None)]))
    assert no_count["mha"] == dict(time=pytest.approx(1.1), flops=None)  # a row without its FLOP count: no FLOP bar
    assert plot_llama.run_name(RUN) == "ours, H200, activation checkpointing"
    assert plot_llama.run_name(RUN, "call2") == "ours, H200, activation checkpointing (call2)"
    assert plot_llama.run_name(dict(RUN, args=dict(suite="llama1b", graph_step=True))) == "ours, H200, graph step"


def test_every_run_gets_its_bars_and_the_flops_come_from_any_run(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    drawn = []
    real_barh = None

    def spy(self, ys, widths, *args, label=None, **kwargs):
        drawn.append((label, len(ys)))
        return real_barh(self, ys, widths, *args, label=label, **kwargs)
    from matplotlib.axes import Axes
    real_barh = Axes.barh
    monkeypatch.setattr(Axes, "barh", spy)
    small = dict(RUN, rows=RUN["rows"][:2])  # GQA-8 and Tucker only
    runs = [small] + [RUN] * 5  # six runs: more than there used to be colors
    assert plot_llama.plot(runs, tmp_path / "f.png", [f"r{i}" for i in range(6)])
    labels = [label for label, _ in drawn]
    assert labels[0].startswith("paper") and labels[-1] == "FLOPs (ours)"
    assert labels[1:-1] == [f"ours, H200, activation checkpointing (r{i})" for i in range(6)]
    assert drawn[-1][1] == 3  # GQA-8, Tucker and MHA: the FLOP bars of rows only the later runs measured


def test_the_figure_is_written_and_a_run_without_gqa8_refused(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(RUN))
    b.write_text(json.dumps(dict(RUN, args=dict(suite="llama1b"), rows=RUN["rows"][:2])))
    assert plot_llama.main([str(a), str(b)]) == 0
    png = tmp_path / "a.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    b.write_text(json.dumps(dict(RUN, rows=RUN["rows"][1:])))  # no GQA-8 row
    c = tmp_path / "c.json"
    c.write_text(json.dumps(dict(RUN, args=dict(suite="gpt2"))))  # a GPT-2 run
    assert plot_llama.main([str(a), str(b), str(c), "--out", str(tmp_path / "none.png")]) == 1
    err = capsys.readouterr().err
    assert str(b) in err and str(c) in err and str(a) not in err and not (tmp_path / "none.png").exists()
    c.write_text("[1, 2]")  # JSON, but not a run
    assert plot_llama.main([str(a), str(c), str(tmp_path / "missing.json"), "--out", str(tmp_path / "none.png")]) == 1
    err = capsys.readouterr().err
    assert "not a bench_train JSON" in err and str(c) in err and "missing.json" in err and str(a) not in err

"""scripts/plot_decode: a bench_decode JSON as one figure. Properties: each curve holds the run's ok rows of its
variant, mode and batch, by context; a speed-up is MHA's default step over the variant's fastest mode at the same
context, only where MHA's was measured, its default step or (a run without it) the first of its other modes measured;
failed cases are left out; the figure is written (matplotlib installed), and
a run without a measured case is refused."""
import json

import pytest

from scripts import plot_decode


def row(variant, mode, batch, context, ms, status="ok"):
    return dict(variant=variant, label=variant.upper(), mode=mode, batch_size=batch, context=context,
                latency_ms=ms, status=status)


ROWS = [row("mha", "graph_merged", 32, 1024, 2.0), row("mha", "graph_merged", 32, 4096, 8.0),
        row("mha", "graph_mega", 32, 4096, 9.0),
        row("tucker", "graph_merged", 32, 4096, 1.0), row("tucker", "graph_mega", 32, 4096, 0.5),
        row("tucker", "graph_mega", 32, 1024, 0.4), row("tucker", "graph_mega", 32, 16384, 0.9),  # no MHA at 16k
        row("tucker", "graph_merged", 32, 1024, 0.1, status="failed"),  # left out everywhere
        row("tucker", "graph_mega", 1, 4096, 0.2)]


def test_curves_hold_each_variant_modes_rows_by_context():
    got = plot_decode.curves(ROWS, 32)
    assert got[("TUCKER", "graph_mega")] == [(1024, 0.4), (4096, 0.5), (16384, 0.9)]
    assert got[("TUCKER", "graph_merged")] == [(4096, 1.0)]  # the failed 1k case is not a point
    assert got[("MHA", "graph_mega")] == [(4096, 9.0)]
    assert plot_decode.curves(ROWS, 1) == {("TUCKER", "graph_mega"): [(4096, 0.2)]}


def test_speedups_are_mhas_default_step_over_the_fastest_mode():
    got = plot_decode.speedups(ROWS, 32, ref_mode="graph_merged")
    assert got["TUCKER"] == [(1024, 2.0 / 0.4), (4096, 8.0 / 0.5)]  # the faster mode; 16k has no reference
    assert got["MHA"] == [(1024, 1.0), (4096, 1.0)]  # its default step (8.0) beat its one launch (9.0)
    assert plot_decode.speedups(ROWS, 1) == {}  # no MHA row at batch 1: nothing to compare with


def test_the_reference_mode_falls_back_to_what_the_run_measured():
    assert plot_decode.reference_mode(ROWS) == "graph_merged"  # runs before graph_default measured it so
    # the model's own default step (graph_default) comes before graph_merged where a run has both
    both = ROWS + [row("mha", "graph_default", 32, 4096, 7.0)]
    assert plot_decode.reference_mode(both) == "graph_default"
    assert plot_decode.speedups(both, 32, ref_mode=plot_decode.reference_mode(both))["MHA"] == [(4096, 1.0)]
    defaults = [dict(r, mode={"graph_merged": "graph", "graph_mega": "graph_sdpa"}[r["mode"]]) for r in ROWS]
    assert plot_decode.reference_mode(defaults) == "graph"  # bench_decode's default modes: no graph_merged
    assert plot_decode.reference_mode([r for r in defaults if r["mode"] != "graph"]) == "graph_sdpa"
    assert plot_decode.reference_mode([r for r in ROWS if r["variant"] != "mha"]) is None
    # MHA's default step failed: not the reference; its other mode measured is
    failed = [dict(r, status="failed") if (r["variant"], r["mode"]) == ("mha", "graph_merged") else r for r in ROWS]
    assert plot_decode.reference_mode(failed) == "graph_mega"
    # a run whose MHA rows are only in a mode outside the fallback list: that mode
    assert plot_decode.reference_mode([r for r in ROWS if r["mode"] == "graph_mega"]) == "graph_mega"
    assert plot_decode.speedups(defaults, 32, ref_mode="graph")["TUCKER"] == [(1024, 2.0 / 0.4), (4096, 8.0 / 0.5)]


def test_the_figure_is_written_and_an_empty_run_refused(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    src = tmp_path / "run.json"
    src.write_text(json.dumps(dict(rows=ROWS, gpu="test GPU", torch="x")))
    assert plot_decode.main([str(src)]) == 0
    png = tmp_path / "run.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    src.write_text(json.dumps(dict(rows=[row("mha", "graph_merged", 1, 1024, 1.0, status="failed")])))
    assert plot_decode.main([str(src), "--out", str(tmp_path / "none.png")]) == 1
    assert "no measured case" in capsys.readouterr().err and not (tmp_path / "none.png").exists()


def test_a_missing_or_non_object_json_is_one_line(tmp_path, capsys):
    """plot_decode and plot_train read their inputs through checkpoint.read_json_args: a missing file, or JSON that is
    not an object, is one line naming it and exit 1 (it was a traceback)."""
    from scripts import plot_train
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    missing = tmp_path / "missing.json"
    assert plot_decode.main([str(missing)]) == 1
    assert "plot_decode: not a bench_decode JSON" in capsys.readouterr().err
    assert plot_train.main([str(listed), str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(listed) in err and str(missing) in err


def test_save_figure_writes_and_closes_the_figure(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    from checkpoint import save_figure
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    save_figure(fig, tmp_path / "f.png", dpi=50)
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG" and fig.number not in plt.get_fignums()


def test_out_without_an_extension_in_a_new_folder_or_a_folder(tmp_path, capsys):
    """--out with no extension writes a PNG there (.png added: the format came from the temp name's suffix, a
    traceback), into a folder made for it; a folder as --out is one line, exit 2."""
    pytest.importorskip("matplotlib")
    src = tmp_path / "run.json"
    src.write_text(json.dumps(dict(rows=ROWS, gpu="test GPU", torch="x")))
    assert plot_decode.main([str(src), "--out", str(tmp_path / "new" / "deeper" / "fig")]) == 0
    assert (tmp_path / "new" / "deeper" / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert plot_decode.main([str(src), "--out", str(tmp_path / "new")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a folder" in err


@pytest.mark.parametrize("modes", [["graph_mega"], ["graph_default", "graph_mega"],
                                   ["forward", "step", "graph_sdpa", "graph"],
                                   ["forward", "step", "graph_sdpa", "graph", "graph_merged", "graph_default",
                                    "graph_mega"]])
def test_each_mode_has_its_own_line(modes):
    """A line style and marker a mode, no two modes alike (a run of bench_decode's default four modes drew its middle
    two as solid as its last, and the title named only the first and last); the first mode dashed, the last solid."""
    styles = plot_decode.mode_styles(modes)
    assert list(styles) == modes
    assert len(set(styles.values())) == len(modes)
    assert styles[modes[-1]][0] == "-"
    if len(modes) > 1:
        assert styles[modes[0]][0] == "--"
        assert len({line for line, _ in styles.values()}) == min(len(modes), 2 + len(plot_decode.MIDDLE_LINES))

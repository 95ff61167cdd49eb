"""scripts/compare_runs.py: loss curves of train.py runs against a reference run, from their log.jsonl."""
import json

import pytest

from scripts import compare_runs


def write_run(folder, losses, vals, config=None, model=None):
    folder.mkdir(parents=True)
    lines = [json.dumps({"iter": i, "train_loss": v + 0.1, "val_loss": v}) for i, v in vals.items()]
    lines += [json.dumps({"iter": i, "loss": v, "lr": 1e-3}) for i, v in losses.items()]
    (folder / "log.jsonl").write_text("\n".join(lines) + "\n" + '{"iter": 99, "lo')  # a line cut by a kill
    if config:
        (folder / "summary.json").write_text(json.dumps({"config": config,
                                                         "model_config": {"loss_chunk_tokens": 64, **(model or {})}}))
    return folder


def test_differences_against_the_first_run(tmp_path):
    ref = write_run(tmp_path / "plain", {1: 4.0, 2: 3.0, 3: 2.5, 4: 2.0}, {0: 4.1, 4: 2.2})
    fast = write_run(tmp_path / "fast", {1: 4.0, 2: 3.01, 3: 2.47, 5: 1.0}, {0: 4.1, 5: 2.25},
                     config={"compile": True, "compile_mode": "reduce-overhead", "dtype": "bfloat16", "seed": 1})
    res = compare_runs.main([str(ref), str(fast), "--out", str(tmp_path / "out"), "--name", "t"])
    a, b = res["rows"]
    assert a["max_abs_diff"] == 0.0 and a["iters_compared"] == 4 and a["final_val_diff"] == 0.0
    assert b["iters_compared"] == 3  # iterations 1-3: iteration 4 and 5 are each in one run only
    assert b["max_abs_diff"] == pytest.approx(0.03) and b["iter_of_max"] == 3
    assert b["mean_abs_diff"] == pytest.approx((0.0 + 0.01 + 0.03) / 3)
    assert b["max_rel_diff"] == pytest.approx(0.03 / 2.5)
    assert b["final_val_loss"] == 2.25 and b["final_val_diff"] == pytest.approx(0.05)
    assert b["final_train_loss"] == 1.0 and b["last_iter"] == 5
    assert b["config"] == {"compile": True, "compile_mode": "reduce-overhead", "dtype": "bfloat16", "seed": 1,
                           "loss_chunk_tokens": 64}
    out = tmp_path / "out"
    saved = json.loads((out / "t.json").read_text())
    assert saved["reference"] == str(ref) and saved["rows"][1]["max_abs_diff"] == pytest.approx(0.03)
    md = (out / "t.md").read_text()
    assert "| fast | True | reduce-overhead | 64 | 3 | 3.00e-02 (3) |" in md
    assert (out / "t.png").stat().st_size > 0


def test_bad_input_is_one_line(tmp_path):
    ref = write_run(tmp_path / "a", {1: 1.0}, {})
    with pytest.raises(SystemExit, match="at least two runs"):
        compare_runs.main([str(ref), "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="no training losses"):
        compare_runs.main([str(tmp_path / "missing"), str(ref), "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="missing: no training losses"):  # any run, not only the reference
        compare_runs.main([str(ref), str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="given twice"):
        compare_runs.main([str(ref), str(tmp_path / "a" / ".." / "a"), "--out", str(tmp_path / "o")])
    other = write_run(tmp_path / "b", {1: 1.0}, {})
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit, match="is a file, not a folder"):
        compare_runs.main([str(ref), str(other), "--out", str(tmp_path / "file")])
    for stem in ("sub/x", "", ".."):  # a folder, or no name of its own (".json", "...json": hidden files)
        with pytest.raises(SystemExit, match="file name stem"):
            compare_runs.main([str(ref), str(other), "--out", str(tmp_path / "o"), "--name", stem])
    assert not (tmp_path / "o").exists()


def test_help_shows_what_it_does_and_the_example(capsys):
    """--help gave the docstring's first line only, cut mid-sentence ("(issue 14: the"), and no example."""
    with pytest.raises(SystemExit):
        compare_runs.main(["--help"])
    out = capsys.readouterr().out
    assert "against the plain one.)" in out
    assert "out-curve/tucker-fast \\\n        --out results/bench/fastpath_curve --name tucker" in out


def test_final_val_losses_name_their_iterations(tmp_path):
    ref = write_run(tmp_path / "short", {1: 2.0, 2: 1.5}, {0: 3.0, 2: 1.6})
    long = write_run(tmp_path / "long", {1: 2.0, 2: 1.5, 3: 1.0, 4: 0.9}, {0: 3.0, 4: 1.0})
    res = compare_runs.main([str(ref), str(long), "--out", str(tmp_path / "o"), "--name", "t"])
    assert [r["final_val_iter"] for r in res["rows"]] == [2, 4]
    assert "| 1.0000 (4) | -0.6000 |" in (tmp_path / "o" / "t.md").read_text()


def test_runs_of_another_experiment_are_named(tmp_path, capsys):
    """Runs compared for how they compute may differ in compile, dtype or the loss head, and in bookkeeping (how
    often they log, where their data folder is); a different seed, model or batch makes the curves another
    experiment's: named on stderr and under the table, not a silent row."""
    base = {"compile": False, "dtype": "float32", "seed": 1337, "batch_size": 12, "log_interval": 1,
            "data_dir": "data/shakespeare"}
    model = {"n_layer": 2, "attn": "tucker", "loss_head": "fused"}
    ref = write_run(tmp_path / "plain", {1: 2.0, 2: 1.5}, {2: 1.6}, config=base, model=model)
    fast = write_run(tmp_path / "fast", {1: 2.0, 2: 1.5}, {2: 1.6}, config={**base, "compile": True, "dtype":
                     "bfloat16", "log_interval": 10, "data_dir": "/other/machine/shakespeare"},
                     model={**model, "loss_head": "logits", "loss_chunk_tokens": 0})
    other = write_run(tmp_path / "other", {1: 2.0, 2: 1.4}, {2: 1.5}, config={**base, "seed": 1, "batch_size": 8},
                      model={**model, "n_layer": 3})
    (tmp_path / "cut").mkdir()  # an interrupted run: config.json, no summary.json
    (tmp_path / "cut" / "log.jsonl").write_text(json.dumps({"iter": 1, "loss": 2.0}) + "\n")
    (tmp_path / "cut" / "config.json").write_text(json.dumps({**base, "seed": 7, "n_layer": 2, "attn": "mha"}))
    capsys.readouterr()
    res = compare_runs.main([str(ref), str(fast), str(other), str(tmp_path / "cut"), "--out", str(tmp_path / "o"),
                             "--name", "t"])
    diffs = {r["run"]: r["setting_differences"] for r in res["rows"]}
    assert diffs[str(ref)] == {} and diffs[str(fast)] == {}  # compute and bookkeeping keys only
    assert diffs[str(other)] == {"batch_size": [12, 8], "n_layer": [2, 3], "seed": [1337, 1]}
    assert diffs[str(tmp_path / "cut")] == {"attn": ["tucker", "mha"], "seed": [1337, 7]}  # its model from config.json
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: not the reference's experiment: other: batch_size 12 -> 8, n_layer 2 -> 3, seed 1337 -> 1",
                   "warning: not the reference's experiment: cut: attn \"tucker\" -> \"mha\", seed 1337 -> 7"]
    md = (tmp_path / "o" / "t.md").read_text()
    assert "**Not the same experiment as the reference**" in md and "- other: batch_size 12 -> 8" in md
    assert json.loads((tmp_path / "o" / "t.json").read_text())["rows"][2]["setting_differences"]["seed"] == [1337, 1]
    (tmp_path / "cut" / "config.json").write_text("[1, 2]")  # not a dict: nothing to compare, no crash
    assert compare_runs.setting_differences(ref, tmp_path / "cut") == {}


def test_an_interrupted_runs_raw_model_keys_are_compared_as_filled_in(tmp_path):
    """A finished run's summary holds GPTConfig's model_config (tucker_ranks_post filled in as tucker_ranks), an
    interrupted run's config.json the keys as given (tucker_ranks_post=None): the same experiment, no difference;
    another tucker_ranks_post is one. Filling adds no key (scripts.sweep then compares only the keys a run saved)."""
    from model import GPTConfig
    given = dict(attn="tucker", tucker_ranks=[8, 64, 64], tucker_ranks_post=None, n_layer=2)
    built = json.loads(json.dumps(GPTConfig.from_dict(given).to_dict()))
    assert built["tucker_ranks_post"] == [8, 64, 64]
    assert compare_runs.with_model_keys_filled({**given, "seed": 1}) == {**given, "tucker_ranks_post": [8, 64, 64],
                                                                          "tucker_ranks": [8, 64, 64], "seed": 1}
    base = {"seed": 1337, "batch_size": 12}
    ref = write_run(tmp_path / "done", {1: 2.0}, {1: 2.1}, config=base, model=built)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "log.jsonl").write_text(json.dumps({"iter": 1, "loss": 2.0}) + "\n")
    (cut / "config.json").write_text(json.dumps({**base, **given}))
    assert compare_runs.setting_differences(ref, cut) == {}
    (cut / "config.json").write_text(json.dumps({**base, **given, "tucker_ranks_post": [4, 64, 64]}))
    assert compare_runs.setting_differences(ref, cut) == {"tucker_ranks_post": [[8, 64, 64], [4, 64, 64]]}


def test_runs_of_one_folder_name_are_told_apart(tmp_path):
    """Two runs named alike in different folders (a sweep's seeds, two machines' copies) get labels that differ: the
    fewest trailing path parts that tell them apart; a name of its own stays as it is."""
    base = {"seed": 1337}
    a = write_run(tmp_path / "a" / "mha", {1: 2.0, 2: 1.5}, {2: 1.6}, config=base)
    b = write_run(tmp_path / "b" / "mha", {1: 2.0, 2: 1.4}, {2: 1.5}, config=base)
    c = write_run(tmp_path / "b" / "tucker", {1: 2.0, 2: 1.3}, {2: 1.4}, config=base)
    assert compare_runs.labels([str(a), str(b), str(c)]) == {str(a): "a/mha", str(b): "b/mha", str(c): "tucker"}
    compare_runs.main([str(a), str(b), str(c), "--out", str(tmp_path / "o"), "--name", "t"])
    rows = [line.split("|")[1].strip() for line in (tmp_path / "o" / "t.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| run") and not line.startswith("| ---")]
    assert rows == ["a/mha", "b/mha", "tucker"]


def test_the_largest_difference_names_its_iteration(tmp_path):
    """iter_of_max is the iteration of the largest difference wherever it lies on the curve (not the last one both
    logged); an iteration where the reference's loss is 0 has no relative difference (nothing to divide by)."""
    ref = write_run(tmp_path / "ref", {1: 4.0, 2: 3.0, 3: 0.0, 4: 2.0}, {})
    run = write_run(tmp_path / "run", {1: 4.5, 2: 3.1, 3: 0.2, 4: 2.05}, {})
    _, row = compare_runs.compare([str(ref), str(run)])["rows"]
    assert row["max_abs_diff"] == pytest.approx(0.5) and row["iter_of_max"] == 1
    assert row["max_rel_diff"] == pytest.approx(0.5 / 4.0)  # of iterations 1, 2 and 4


def test_the_lower_panel_plots_each_run_but_the_reference_against_it(tmp_path, monkeypatch):
    """The plot: every run's curve above; below, each other run minus the reference (the reference against itself
    would be a flat line over the zero line), a run in one color in both panels."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    figs = []
    monkeypatch.setattr(compare_runs, "save_figure", lambda fig, path, **kw: figs.append(fig))
    runs = [str(write_run(tmp_path / name, {1: 2.0, 2: 1.5 - k / 10}, {})) for k, name in enumerate("abc")]
    assert compare_runs.plot(compare_runs.compare(runs), tmp_path / "p.png", "t")
    top, bottom = figs[0].axes
    above = {line.get_label(): line.get_color() for line in top.get_lines()}
    below = {line.get_label(): line.get_color() for line in bottom.get_lines() if not line.get_label().startswith("_")}
    plt.close(figs[0])
    assert list(above) == ["a", "b", "c"] and below == {k: above[k] for k in ("b", "c")}

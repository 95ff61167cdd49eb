"""scripts/bench_multigpu.py on CPU with gloo (what the GPU sitting runs with NCCL): the scaling table's
runs agree with one process on the same global batch, a 2-process checkpoint continues on 1 process
exactly as the uninterrupted 2-process run, and a SIGKILLed rank ends the job promptly with the last
checkpoint intact and resumable."""
import json
import sys
import time

import numpy as np
import pytest

from scripts import bench_multigpu as bm

TINY = """n_layer = 1
n_head = 2
n_embd = 16
block_size = 16
vocab_size = 64
bias = False
device = 'cpu'
compile = False
dtype = 'float32'
dropout = 0.0
warmup_iters = 0
lr_decay_iters = 100
learning_rate = 1e-3
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("multigpu")
    (root / "data").mkdir()
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        rng.integers(0, 64, 6000).astype(np.uint16).tofile(root / "data" / f"{split}.bin")
    (root / "tiny.py").write_text(TINY)
    common = ["--configs", str(root / "tiny.py"), "--batch_size", "2", "--global_batch", "4",
              "--run_timeout", "240"]  # a hung job fails its test; it cannot hold the suite
    return root, common, ["--", f"--data_dir={root / 'data'}"]


@pytest.fixture(scope="module")
def scaling(setup, monkeypatch_module):
    root, common, extra = setup
    return bm.main(["scaling", *common, "--nprocs", "1,2", "--iters", "8", "--skip", "2",
                    "--out_dir", str(root / "scaling"), *extra])


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    mp.setenv("OMP_NUM_THREADS", "1")  # two processes on two CI cores
    yield mp
    mp.undo()


def test_scaling_rows_agree_with_one_process(scaling, setup):
    root = setup[0]
    one, two = scaling["rows"]
    assert (one["nproc"], two["nproc"]) == (1, 2) and one["finished"] and two["finished"]
    assert two["ranks"] == 2 and two["ranks_identical"]
    # the ranks' weights, from train.py's own summary rather than the script's verdict
    checks = json.loads((root / "scaling" / "tiny-ddp-2" / "summary.json").read_text())["rank_weight_checksums"]
    assert len(checks) == 2 and checks[0] == checks[1]
    assert sorted(one["losses"]) == sorted(two["losses"]) == list(range(1, 9))
    # 2 processes follow 1 process's loss curve (float32: reduction order only), recomputed here from the losses
    diff = max(abs(two["losses"][i] - one["losses"][i]) for i in range(1, 9))
    assert diff < 1e-5
    assert two["max_loss_diff_vs_first"] == diff and two["loss_iters_compared"] == 8  # and reported as such
    assert one["efficiency"] == pytest.approx(1.0)
    assert two["efficiency"] == pytest.approx(two["tokens_per_s"] / (2 * one["tokens_per_s"]))
    assert json.loads((root / "scaling" / "scaling.json").read_text())["rows"][1]["nproc"] == 2
    assert "| tiny | ddp | 2 |" in (root / "scaling" / "scaling.md").read_text()


def test_scaling_reuses_only_the_same_command(scaling, setup, capsys):
    """A finished run folder is reused by the same command only: other train.py arguments run it again."""
    root, common, extra = setup
    argv = ["scaling", *common, "--nprocs", "1", "--iters", "8", "--skip", "2", "--out_dir", str(root / "scaling")]
    capsys.readouterr()
    again = bm.main([*argv, *extra])
    assert "$ " not in capsys.readouterr().out  # nothing launched
    assert again["rows"][0]["losses"] == scaling["rows"][0]["losses"]
    out = root / "scaling" / "tiny-ddp-1"
    ran = json.loads((out / bm.ARGV_FILE).read_text())
    assert bm.is_done(out, ["python", *ran])
    assert not bm.is_done(out, ["python", *ran, "--learning_rate=2e-3"])  # another command: run again


def test_two_process_checkpoint_continues_on_one_process(scaling, setup):
    root, common, extra = setup
    res = bm.main(["resume", *common, "--from_nproc", "2", "--nprocs", "1", "--split_iter", "4", "--iters", "8",
                   "--reference", str(root / "scaling" / "tiny-ddp-2"), "--out_dir", str(root / "resume"), *extra])
    source, cont = res["runs"]
    assert source["finished"] and cont["finished"] and cont["nproc"] == 1
    assert sorted(cont["losses"]) == [5, 6, 7, 8]
    # the same curve as the run that was never stopped (the scaling run on 2 processes), recomputed here
    uninterrupted = scaling["rows"][1]
    assert uninterrupted["nproc"] == 2 and uninterrupted["out_dir"] == str(root / "scaling" / "tiny-ddp-2")
    diff = max(abs(cont["losses"][i] - uninterrupted["losses"][i]) for i in (5, 6, 7, 8))
    assert diff < 1e-5
    assert cont["max_loss_diff_vs_uninterrupted"] == diff  # and reported as such


def test_killed_rank_ends_the_job_with_the_checkpoint_intact(setup, monkeypatch_module):
    root, common, extra = setup
    res = bm.main(["kill", *common, "--nprocs", "2", "--ckpt_every", "3", "--kill_after_iter", "4",
                   "--timeout", "120", "--out_dir", str(root / "kill"), *extra])
    shown = {k: v for k, v in res.items() if k != "command"}  # what a failure prints
    assert res["exit_code"] not in (0, None), shown  # torchrun reports the failure ...
    assert res["seconds_to_exit"] < 60 and res["workers_left"] == [], shown  # ... promptly, no rank left hanging
    # killed at an iteration that writes no checkpoint: the last one (the log's last best_iter) is intact
    assert res["killed_after_iter"] % 3 != 0 and res["checkpoint_iter"] == res["expected_checkpoint_iter"] >= 3, shown
    assert res["checkpoint_iter"] % 3 == 0 and res["checkpoint_iter"] <= res["last_logged_iter"], shown
    assert res["checkpoint_loads"], shown
    assert res["temp_files_left"] == [], shown
    assert res["resume_exit_code"] == 0 and res["resumed_iters"] == res["checkpoint_iter"] + 3, shown


def test_bad_batch_split_is_one_line_error(setup):
    root, common, extra = setup
    with pytest.raises(SystemExit) as e:
        bm.main(["scaling", "--configs", str(root / "tiny.py"), "--batch_size", "2", "--global_batch", "6",
                 "--nprocs", "4", "--out_dir", str(root / "bad"), *extra])
    assert "do not divide over 4 processes" in str(e.value.code)


def test_a_missing_config_is_one_line_before_any_run(setup, capsys):
    """A config file that is not there (a README's list copied with '...' in it): refused before any run starts
    (each run started torchrun, then failed on the file)."""
    root, common, extra = setup
    with pytest.raises(SystemExit) as e:
        bm.main(["scaling", "--configs", f"{root / 'tiny.py'},...", "--nprocs", "1", "--out_dir", str(root / "none"),
                 *extra])
    assert e.value.code == 2 and "--configs: ... not found" in capsys.readouterr().err
    assert not (root / "none").exists()


def test_scaling_where_no_run_finishes_fails(setup, tmp_path):
    """A scaling sweep whose every run fails (here: no dataset) writes its table of NO rows, then exits non-zero."""
    root, common, _ = setup
    with pytest.raises(SystemExit) as e:
        bm.main(["scaling", *common, "--nprocs", "1", "--iters", "2", "--out_dir", str(tmp_path / "none"), "--",
                 f"--data_dir={tmp_path / 'no-data'}"])
    assert "no run finished" in str(e.value.code)
    assert "| tiny | ddp | 1 | NO |" in (tmp_path / "none" / "scaling.md").read_text()


def llama_row(name, ms, fwd, bwd, mode="ddp", nproc=4):
    """A bench_multigpu result row of the paper's LLaMA-1B config `name`."""
    return dict(config=f"config/owt2_llama1b_{name}.py", mode=mode, nproc=nproc, ms_per_iter=ms, fwd_ms=fwd, bwd_ms=bwd)


def test_llama_rows_beside_the_paper():
    """Rows whose configs are the paper's LLaMA-1B rows get the paper's ratios (its train-iteration,
    forward and backward times over GQA-8's and MHA's) beside ours, and each model's FLOP count; MHA's
    extra FLOPs over GQA-8 are exactly its extra key/value projections."""
    row = llama_row
    res = dict(block_size=4096, rows=[row("gqa8", 2000.0, 600.0, 1300.0), row("tucker_32_64_64", 1800.0, 540.0, 1200.0),
                                      row("mha", 2200.0, 700.0, 1450.0), row("mha", 2100.0, 650.0, 1400.0, mode="fsdp"),
                                      row("mqa", None, None, None),  # no time: left out
                                      dict(row("gqa2", 1900.0, 600.0, 1200.0), finished=False)])  # cut short: left out
    items = {(it["id"], it["mode"]): it for it in bm.paper_comparison(res)}
    assert set(items) == {("gqa8", "ddp"), ("tucker_32_64_64", "ddp"), ("mha", "ddp"), ("mha", "fsdp")}
    res["rows"][1]["config"] = "./config/owt2_llama1b_tucker_32_64_64.py"  # the same file, however it was named
    assert bm.paper_comparison(res)[1]["id"] == "tucker_32_64_64"
    t = items["tucker_32_64_64", "ddp"]
    assert t["iter_vs_gqa8"] == pytest.approx(0.9) and t["fwd_vs_gqa8"] == pytest.approx(0.9)
    assert t["iter_vs_mha"] == pytest.approx(1800 / 2200)
    assert t["paper_iter_vs_gqa8"] == pytest.approx(4.05 / 4.87) and t["paper_iter_vs_mha"] == pytest.approx(4.05 / 5.19)
    assert t["paper_bwd_vs_gqa8"] == pytest.approx(2.70 / 3.30)
    m = items["mha", "fsdp"]  # no GQA-8 row at its mode: our ratios are missing, the paper's are not
    assert m["iter_vs_gqa8"] is None and m["iter_vs_mha"] == 1.0 and m["paper_iter_vs_gqa8"] == pytest.approx(5.19 / 4.87)
    L, d, nH, nG, dH = 16, 2048, 32, 8, 64
    extra = 3 * 2 * L * d * 2 * (nH - nG) * dH  # forward + backward FLOPs of the larger K and V projections
    mha, gqa8 = items["mha", "ddp"]["flops_per_token"], items["gqa8", "ddp"]["flops_per_token"]
    assert mha - gqa8 == extra
    md = "\n".join(bm.paper_comparison_md(res))
    assert "| Tucker [32,64,64] | ddp | 4 | 1800.0 |" in md and f"{4.05 / 4.87:.3f}" in md
    assert bm.paper_comparison(dict(block_size=1024, rows=[dict(row("x", 1.0, 1.0, 1.0), config="config/enwiki_mha.py")])) == []


def test_a_run_past_its_timeout_is_stopped_with_its_children(tmp_path, processes_running):
    """run_train stops a job that hangs (here a launcher and a worker it started in a session of its own,
    as torchrun does) after --run_timeout: exit code 124, the worker's stacks in the log (train.py prints
    them on SIGUSR1), and no process of it left (a hung torchrun job once held CI to its time limit)."""
    marker = f"hung-{tmp_path.name}"
    worker = "import faulthandler, signal, time; faulthandler.register(signal.SIGUSR1); time.sleep(300)"
    job = [sys.executable, "-c", "import subprocess, sys, time; "
           f"subprocess.Popen([sys.executable, '-c', {worker!r}, '{marker}'], start_new_session=True); time.sleep(300)", "torch.distributed.run"]
    t0 = time.time()
    assert bm.run_train(job, tmp_path / "run", timeout=2) == 124
    assert time.time() - t0 < 30
    assert 'File "<string>", line 1 in <module>' in (tmp_path / "run" / "train.log").read_text()
    time.sleep(0.5)
    assert processes_running(marker) == []


def argv_args(**kw):
    import types
    return types.SimpleNamespace(**{**dict(global_batch=48, batch_size=12, iters=16, eval_iters=2,
                                           extra=["--data_dir=d", "--max_iters=3"]), **kw})


def test_train_argv_is_the_run_asked_for(tmp_path):
    """The train.py command of a run: python train.py for one process, torchrun (one node, --standalone) for several;
    the global batch as gradient accumulation over micro-batches, its evaluation interval (--iters without one), FSDP
    for mode fsdp only, a resume for resume runs; the arguments after `--` last (they win); a global batch that is no
    multiple of the micro-batch refused naming both."""
    one = bm.train_argv("config/x.py", 1, argv_args(), tmp_path)
    assert one[:3] == [sys.executable, "train.py", "config/x.py"] and bm._nproc_of(one) == 1
    assert {"--gradient_accumulation_steps=4", "--max_iters=16", "--eval_interval=16", "--fsdp=False",
            "--save_checkpoint=False"} <= set(one) and "--init_from=resume" not in one
    assert one[-2:] == ["--data_dir=d", "--max_iters=3"]  # last: they win
    four = bm.train_argv("config/x.py", 4, argv_args(), tmp_path, mode="fsdp", iters=8, eval_interval=2, save=True,
                         resume=True)
    assert four[:6] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4", "train.py"]
    assert bm._nproc_of(four) == 4
    assert {"--max_iters=8", "--eval_interval=2", "--fsdp=True", "--save_checkpoint=True", "--init_from=resume"} <= set(four)
    assert four[-2:] == ["--data_dir=d", "--max_iters=3"]
    with pytest.raises(ValueError, match="--global_batch=50 is not a multiple of --batch_size=12"):
        bm.train_argv("config/x.py", 1, argv_args(global_batch=50), tmp_path)


def test_is_done_only_for_a_finished_run_of_the_same_command(tmp_path):
    """A run folder counts as done when its recorded command is this one (whatever the interpreter's path) and its
    summary says finished; a run cut short is run again."""
    argv = ["/usr/bin/python3", "train.py", "config/x.py", "--max_iters=8"]
    (tmp_path / bm.ARGV_FILE).write_text(json.dumps(argv[1:]))
    (tmp_path / "summary.json").write_text(json.dumps({"finished": True}))
    assert bm.is_done(tmp_path, argv) and bm.is_done(tmp_path, ["/other/python", *argv[1:]])
    assert not bm.is_done(tmp_path, [*argv, "--seed=2"])
    (tmp_path / "summary.json").write_text(json.dumps({"finished": False}))
    assert not bm.is_done(tmp_path, argv)


def test_run_stats_from_the_log_and_summary(tmp_path):
    """One run's figures: ms/iter the median wall time of the iterations after --skip, tokens/s from it, rank 0's
    phase times, the largest peak memory over the ranks, and the ranks' weights identical only when every rank's
    checksum is there and equal."""
    log = [dict(iter=i, loss=5.0 - i / 10, ms_per_iter=ms) for i, ms in enumerate([100, 90, 10, 20, 30, 40], start=1)]
    log.append(dict(iter=6, val_loss=4.5))
    (tmp_path / "log.jsonl").write_text("\n".join(json.dumps(r) for r in log) + "\n")

    def stats(checks):
        (tmp_path / "summary.json").write_text(json.dumps(dict(
            finished=True, ms_per_iter=dict(fwd=1.0, bwd=2.0, opt=0.5), peak_memory_gib=[2.5, 3.25],
            rank_weight_checksums=checks, device_name="H200", final_val_loss=4.5)))
        return bm.run_stats(tmp_path, skip=2, tokens_per_iter=1000)
    s = stats([7.0, 7.0])
    assert s["ms_per_iter"] == 25.0 and s["timed_iters"] == 4  # iterations 3..6
    assert s["tokens_per_s"] == pytest.approx(40_000.0)
    assert (s["fwd_ms"], s["bwd_ms"], s["opt_ms"], s["peak_memory_gib"]) == (1.0, 2.0, 0.5, 3.25)
    assert s["ranks_identical"] and s["ranks"] == 2 and s["losses"][6] == pytest.approx(4.4)
    assert not stats([7.0, 7.5])["ranks_identical"]
    assert not stats([])["ranks_identical"]  # no checksums: nothing shows the ranks agree


def test_max_loss_diff_over_the_common_iterations():
    assert bm.max_loss_diff({1: 1.0, 2: 2.0, 3: 3.0}, {2: 2.5, 3: 3.1, 4: 9.0}) == (0.5, 2)
    assert bm.max_loss_diff({1: 1.0}, {2: 1.0}) == (None, 0)


def scaling_row(config, nproc, ms, **kw):
    return dict(dict(config=config, mode="ddp", nproc=nproc, finished=True, ms_per_iter=ms, tokens_per_s=1e6 / ms,
                     fwd_ms=1.0, bwd_ms=2.0, opt_ms=0.5, peak_memory_gib=3.0, ranks_identical=True, ranks=nproc,
                     losses={}), **kw)


def test_scaling_table_ratios_and_render(tmp_path, capsys):
    """The scaling table: each row's ms against the first config's at the same mode and GPU count, the efficiency as
    a percentage, the loss curve first -> last iteration in iteration order (the JSON's keys are strings: '10' after
    '9'), and `render` rewrites the .md from the .json with its footer."""
    rows = [scaling_row("config/a.py", 1, 100.0, efficiency=1.0),
            scaling_row("config/a.py", 2, 60.0, efficiency=100 / 120),
            scaling_row("config/b.py", 1, 80.0, efficiency=1.0),
            scaling_row("config/b.py", 2, 30.0, efficiency=80 / 60, max_loss_diff_vs_first=0.0, loss_iters_compared=10,
                        losses={str(i): 5.0 - i / 10 for i in range(1, 11)})]
    res = dict(kind="scaling", global_batch=8, batch_size=2, block_size=16, iters=10, skip=2, rows=rows)
    bm.add_ratios(res)
    assert res["first_config"] == "a"
    assert [r["ms_vs_first_config"] for r in rows] == [1.0, 1.0, 0.8, 0.5]
    (tmp_path / "scaling.json").write_text(json.dumps(dict(res, gpu="H200", gpus_visible=4, torch_version="2.x",
                                                           date="2026-01-01")))
    assert bm.render(str(tmp_path)) == [str(tmp_path / "scaling.md")]
    (tmp_path / "logs").mkdir()
    bm.main(["render", str(tmp_path), str(tmp_path / "logs")])  # a folder without results says so (was "wrote ")
    assert capsys.readouterr().out.splitlines() == [f"{tmp_path}: wrote {tmp_path / 'scaling.md'}",
                                                    f"{tmp_path / 'logs'}: nothing to render (no result files)"]
    md = (tmp_path / "scaling.md").read_text()
    assert "| b | ddp | 2 | yes | 30.0 | 0.500 | 33,333 | 133.3% | 1.0 / 2.0 / 0.5 | 3.00 | yes (2) | 0.0e+00 (10) " \
           "| 4.900 → 4.000 |" in md
    assert "| a | ddp | 2 | yes | 60.0 | 1.000 | 16,667 | 83.3% |" in md
    assert md.endswith("\n\nH200 (x4 visible), torch 2.x, 2026-01-01.\n")


def test_resume_and_kill_tables():
    """The resume table: iterations after the checkpoint, each continuation's finish, ranks' agreement and loss
    differences (an exact 0 shown as 0, not as missing); the kill table: the number of workers left alive."""
    cont = dict(role="continued", finished=True, ranks_identical=True, max_loss_diff_vs_same_nproc=0.0,
                iters_compared=8, final_val_loss=3.21)
    res = dict(config="config/enwiki_mha.py", from_nproc=4, split_iter=8, iters=16, global_batch=480,
               runs=[dict(role="source"), dict(cont, nproc=4),
                     dict(cont, nproc=2, ranks_identical=False, max_loss_diff_vs_same_nproc=1.5e-3,
                          max_loss_diff_vs_uninterrupted=2e-3)])
    md = bm.resume_md(res)
    assert "iterations 9..16." in md
    assert "| 4 | True | yes | 0.00e+00 (8 iters) | - | 3.2100 |" in md
    assert "| 2 | True | NO | 1.50e-03 (8 iters) | 2.00e-03 | 3.2100 |" in md
    kill = dict(config="config/enwiki_mha.py", nproc=2, victim_local_rank=1, killed_after_iter=7, seconds_to_exit=3.21,
                exit_code=1, workers_left=[123, 456], checkpoint_loads=True, checkpoint_iter=4,
                expected_checkpoint_iter=4, temp_files_left=[], resumed_iters=8, resumed_finished=True)
    assert "| 3.2 | 1 | 2 | True | 4 (4) | 0 | 8 (finished) |" in bm.kill_md(kill)


def test_paper_ratios_only_at_the_same_gpu_count():
    """A paper row's ratio over GQA-8 is taken against GQA-8's run at its own mode and GPU count only; the table's
    last pair of columns is ours and the paper's iteration time over MHA's."""
    def row(name, ms, nproc):
        return llama_row(name, ms, ms / 3, ms / 2, nproc=nproc)
    res = dict(block_size=256, rows=[row("gqa8", 2000.0, 4), row("mha", 2200.0, 4), row("tucker_32_64_64", 1800.0, 4),
                                     row("tucker_32_64_64", 1000.0, 8)])
    items = bm.paper_comparison(res)
    assert items[3]["nproc"] == 8 and items[3]["iter_vs_gqa8"] is None and items[3]["iter_vs_mha"] is None
    line = next(x for x in bm.paper_comparison_md(res) if x.startswith("| Tucker [32,64,64] | ddp | 4 |"))
    assert line.endswith(f"| {1800 / 2200:.3f} | {4.05 / 5.19:.3f} |")


def test_process_tree_helpers(monkeypatch):
    """The job's processes: children and every level below (torchrun's workers run in sessions of their own, below
    the launcher), a process's parent read from /proc even when its name holds ')', and a worker's LOCAL_RANK (not
    its global RANK) from its environment."""
    import os
    import subprocess
    with monkeypatch.context() as m:
        m.setattr(bm, "_parents", lambda: {10: 1, 11: 10, 12: 11, 13: 1, 14: 12, 15: 10})
        assert bm._children(10) == [11, 15] and bm._descendants(10) == [11, 15, 12, 14]
    code = "import ctypes, sys, time; ctypes.CDLL(None).prctl(15, b'w) x y', 0, 0, 0); print(1, flush=True); time.sleep(30)"
    env = {"RANK": "5", "LOCAL_RANK": "3", **{k: v for k, v in os.environ.items() if "RANK" not in k}}
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert p.stdout.readline().strip() == "1"
        assert open(f"/proc/{p.pid}/comm").read().strip() == "w) x y"
        assert p.pid in bm._children(os.getpid())
        assert bm._local_rank(p.pid) == 3 and bm._local_rank(os.getpid()) is None
    finally:
        p.kill()
        p.wait()


def test_an_unknown_mode_is_refused_before_any_run(setup, tmp_path, capsys):
    root, common, extra = setup
    with pytest.raises(SystemExit) as e:  # (a batch split no run can take: a wrong verdict still launches nothing)
        bm.main(["scaling", "--configs", str(root / "tiny.py"), "--modes", "ddp,zero", "--batch_size", "4",
                 "--global_batch", "6", "--nprocs", "1", "--out_dir", str(tmp_path / "x"), *extra])
    assert e.value.code == 2 and "--modes: 'zero' is unknown: allowed 'ddp', 'fsdp'" in capsys.readouterr().err

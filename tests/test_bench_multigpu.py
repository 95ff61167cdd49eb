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


def test_llama_rows_beside_the_paper():
    """Rows whose configs are the paper's LLaMA-1B rows get the paper's ratios (its train-iteration,
    forward and backward times over GQA-8's and MHA's) beside ours, and each model's FLOP count; MHA's
    extra FLOPs over GQA-8 are exactly its extra key/value projections."""
    def row(name, ms, fwd, bwd, mode="ddp"):
        return dict(config=f"config/owt2_llama1b_{name}.py", mode=mode, nproc=4, ms_per_iter=ms, fwd_ms=fwd, bwd_ms=bwd)
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

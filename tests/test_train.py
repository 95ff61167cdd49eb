"""train.py and sample.py end to end on CPU: learning, exact resume after a kill, DDP (gloo),
clear errors, sampling with the cache."""
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

# A tiny GPT on real GPT-2 tokens: the 50k vocabulary stays, everything else is small.
TINY = ["--n_layer=2", "--n_head=4", "--n_embd=32", "--block_size=32", "--batch_size=4", "--bias=False",
        "--device=cpu", "--compile=False", "--eval_iters=4", "--log_interval=1", "--learning_rate=3e-3",
        "--min_lr=3e-4", "--warmup_iters=5", "--weight_decay=0.1", "--dataset=shakespeare"]
FAMILIES = {
    "mha": ["--attn=mha"],
    "gqa": ["--attn=gqa", "--n_kv_head=2", "--pos_emb=rope"],
    "mla": ["--attn=mla", "--q_rank=16", "--kv_rank=16", "--shared_kv=True", "--pos_emb=rope", "--mla_rope=latent"],
    "tucker": ["--attn=tucker", "--tucker_ranks=4,16,16", "--pos_emb=rope"],
}


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory, shakespeare_txt, gpt2_ranks_file):
    from data.shakespeare.prepare import prepare
    out = tmp_path_factory.mktemp("shakespeare")
    prepare(input_path=str(shakespeare_txt), out_dir=str(out), ranks_file=str(gpt2_ranks_file))
    return out


def run(args, check=True, **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if "torch.distributed.run" in args:
        env["OMP_NUM_THREADS"] = "1"  # two processes on two cores
    kw.setdefault("timeout", 600)
    proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, env=env, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def read_log(out_dir):
    return [json.loads(line) for line in (Path(out_dir) / "log.jsonl").read_text().splitlines()]


def train_losses(out_dir):
    return {r["iter"]: r["loss"] for r in read_log(out_dir) if "loss" in r}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_learns(family, data_dir, tmp_path):
    import train  # train.py's main in this process: no interpreter start per family
    out = tmp_path / family
    train.main([*TINY, *FAMILIES[family], f"--data_dir={data_dir}", f"--out_dir={out}", "--max_iters=80",
                "--lr_decay_iters=80", "--eval_interval=40", "--save_checkpoint=False"])
    summary = json.loads((out / "summary.json").read_text())
    evals = [r for r in read_log(out) if "val_loss" in r]
    assert summary["finished"] and summary["iters"] == 80 and summary["tokens"] == 80 * 4 * 32
    assert evals[0]["val_loss"] > 10.5  # ln(50304) = 10.83 at initialization
    assert summary["best_val_loss"] < evals[0]["val_loss"] - 2.0, evals  # loss falls clearly
    assert summary["best_iter"] == 80 and summary["model_config"]["attn"] == FAMILIES[family][0].split("=")[1]
    assert set(summary["ms_per_iter"]) == {"fwd", "bwd", "opt", "total"} and summary["ms_per_iter"]["fwd"] > 0
    assert summary["git_commit"] and summary["kv_values_per_token_per_layer"] > 0


def test_full_val_evaluation_is_the_mean_over_every_window(data_dir, tmp_path, monkeypatch, capsys):
    """eval_full_val: the val loss is the token-weighted mean over all non-overlapping windows. A long evaluation
    says how far it has got (here every batch: the interval set to 0)."""
    import shutil
    import numpy as np
    from model import GPT, GPTConfig
    small = tmp_path / "data"  # the real train split, the first 5,000 val tokens (keeps the test fast)
    small.mkdir()
    shutil.copy(data_dir / "train.bin", small / "train.bin")
    np.fromfile(data_dir / "val.bin", dtype=np.uint16)[:5000].tofile(small / "val.bin")
    import evaluate
    import train
    monkeypatch.setattr(evaluate, "PROGRESS_EVERY_S", 0.0)
    out = tmp_path / "eval"
    train.main([*TINY, *FAMILIES["tucker"], "--block_size=64", "--batch_size=16", f"--data_dir={small}",
                f"--out_dir={out}", "--max_iters=2", "--eval_interval=2", "--eval_full_val=True", "--eval_iters=3"])
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("evaluating")]
    assert said == [f"evaluating {split} at iter {it}: batch {b} of {n}"
                    for it in (0, 2) for split, n in (("train", 3), ("val", 5)) for b in range(1, n + 1)]
    ckpt = torch.load(out / "ckpt.pt", map_location="cpu", weights_only=False)
    model = GPT(GPTConfig(**ckpt["model_config"])).eval()
    model.load_state_dict(ckpt["model"])
    val = torch.from_numpy(np.fromfile(small / "val.bin", dtype=np.uint16).astype(np.int64))
    n = (len(val) - 1) // 64  # 78 windows: 4 full batches of 16 and one of 14
    X = val[:n * 64].view(n, 64)
    Y = val[1:n * 64 + 1].view(n, 64)
    with torch.no_grad():
        expected = torch.cat([model(x, y)[1].view(1) * y.numel() for x, y in zip(X.split(16), Y.split(16))]).sum() / Y.numel()
    logged = [r for r in read_log(out) if r.get("iter") == 2 and "val_loss" in r][0]
    assert logged["val_loss"] == pytest.approx(expected.item(), rel=1e-6)
    # the train loss stays the estimate of eval_iters random batches (drawn from seed + 1), not the whole split
    from evaluate import split_loss
    train_loss = split_loss(model, str(small / "train.bin"), 64, 16, 3, False, torch.device("cpu"),
                            seed=ckpt["config"]["seed"] + 1)
    assert logged["train_loss"] == pytest.approx(train_loss, rel=1e-6)


def test_sigusr1_prints_where_the_job_is(data_dir, tmp_path):
    """`kill -USR1 <pid>` makes a running train.py print every thread's stack and go on (how a hung job
    says where it waits; bench_multigpu asks a job past --run_timeout so before stopping it)."""
    out = tmp_path / "usr1"
    proc = subprocess.Popen([sys.executable, "train.py", *TINY, *FAMILIES["mha"], f"--data_dir={data_dir}",
                             "--max_iters=100000", "--eval_interval=100000", "--save_checkpoint=False",
                             f"--out_dir={out}"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            # Ctrl-C as at a terminal: a suite run as a shell's background job (or under nohup)
                            # hands its children SIGINT ignored, and Python then installs no KeyboardInterrupt
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not ((out / "log.jsonl").exists()
                                               and (out / "log.jsonl").read_text().count("\n") >= 3):
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
        assert proc.poll() is None  # still training
        proc.send_signal(signal.SIGINT)  # then Ctrl-C: one line, no traceback, the status of a process SIGINT ended
        hung = False
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # the stacks say where the job was then, not just that it went on
            hung = True
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2.0)
    finally:
        proc.kill()
        err = proc.communicate(timeout=60)[1]
    assert not hung, f"train.py still ran 60 s after SIGINT; its stderr:\n{err[-6000:]}"
    assert "Current thread" in err and 'train.py", line' in err and "in main" in err, err[-3000:]
    assert proc.returncode == -signal.SIGINT, (proc.returncode, err[-3000:])
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert err.splitlines()[-1].startswith("interrupted at iteration ") and err.splitlines()[-1].endswith(
        ": this run writes no checkpoint (save_checkpoint=False): running it again starts over"), err[-3000:]


def test_kill_and_resume_continues_exactly(data_dir, tmp_path):
    """The killed run in its own process, the reference and the resume in this one (train.py's main)."""
    import train
    args = [*TINY, *FAMILIES["tucker"], f"--data_dir={data_dir}", "--max_iters=40", "--lr_decay_iters=40",
            "--eval_interval=5", "--always_save_checkpoint=True", "--dropout=0.1"]
    ref = tmp_path / "ref"
    train.main([*args, f"--out_dir={ref}"])

    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "train.py", *args, f"--out_dir={killed}"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:  # kill it hard once it is past iteration 17
        log = killed / "log.jsonl"
        if log.exists() and any(r.get("iter", 0) >= 17 for r in read_log(killed) if "loss" in r):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed_from = torch.load(killed / "ckpt.pt", map_location="cpu", weights_only=False)["iter_num"]
    assert 15 <= resumed_from < 40
    train.main([*args, f"--out_dir={killed}", "--init_from=resume"])

    a = torch.load(ref / "ckpt.pt", map_location="cpu", weights_only=False)
    b = torch.load(killed / "ckpt.pt", map_location="cpu", weights_only=False)
    assert a["iter_num"] == b["iter_num"] == 40
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    ref_losses, res_losses = train_losses(ref), train_losses(killed)
    assert all(res_losses[i] == ref_losses[i] for i in range(resumed_from + 1, 41))
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (ref, killed))
    assert sa["best_val_loss"] == sb["best_val_loss"] and sa["best_iter"] == sb["best_iter"]


def test_torchrun_two_processes_match_single_process(data_dir, tmp_path):
    """Also: one evaluation batch over 2 ranks (rank 1 runs no evaluation forward) with a RoPE model, whose
    rotary tables are buffers. DDP broadcast buffers in the first forward after a synced step (and the
    very first), so rank 0 waited in that broadcast and the job hung at its first evaluation (LLaMA-1B
    on 4 GPUs, 2 evaluation batches); DDP no longer broadcasts buffers (the tables are constants)."""
    import train
    common = [*TINY, *FAMILIES["mla"], f"--data_dir={data_dir}", "--max_iters=12", "--lr_decay_iters=12",
              "--eval_interval=6", "--eval_iters=1", "--gradient_accumulation_steps=2", "--save_checkpoint=False"]
    single, double = tmp_path / "single", tmp_path / "ddp"
    train.main([*common, f"--out_dir={single}"])  # the single process in this one
    run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py", *common,
         f"--out_dir={double}"], timeout=240)
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (single, double))
    assert s2["config"]["world_size"] == 2
    c0, c1 = s2["rank_weight_checksums"]
    assert c0 == c1  # both ranks end with identical weights
    l1, l2 = train_losses(single), train_losses(double)
    assert set(l1) == set(l2)
    for i in l1:  # the same global batch each iteration: the same losses up to float32 reduction order
        assert l2[i] == pytest.approx(l1[i], rel=1e-4, abs=1e-4), (i, l1[i], l2[i])
    assert s2["best_val_loss"] == pytest.approx(s1["best_val_loss"], rel=1e-4)


@pytest.mark.parametrize("args,message", [
    (["--no_such_key=3"], "no_such_key"),
    (["--batch_size=big"], "batch_size"),
    (["--compile=maybe"], "compile"),
    (["config/does_not_exist.py"], "does_not_exist"),
    (["--attn=tucker"], "tucker_ranks"),
    (["--init_from=gpt2"], "init_from"),
])
def test_clear_errors_before_any_model(args, message, data_dir, tmp_path, capsys):
    """In process (the command line's exit code and stderr: test_missing_data_says_how_to_prepare)."""
    import train
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        train.main([*TINY, f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *args])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2
    assert message in err and err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "log.jsonl").exists()


def test_missing_data_says_how_to_prepare(tmp_path):
    proc = run(["train.py", *TINY, f"--data_dir={tmp_path}", f"--out_dir={tmp_path}"], check=False)
    assert proc.returncode == 2 and "python -m data.shakespeare.prepare" in proc.stderr


def test_non_finite_loss_stops_and_keeps_checkpoint(data_dir, tmp_path, capsys):
    import train  # train.py's main in this process (its exit status as SystemExit): no interpreter starts
    out = tmp_path / "nan"
    common = [*TINY, *FAMILIES["mha"], f"--data_dir={data_dir}", f"--out_dir={out}", "--eval_interval=4"]
    train.main([*common, "--max_iters=4"])  # a good checkpoint at iteration 4 ...
    good = torch.load(out / "ckpt.pt", map_location="cpu", weights_only=False)["model"]
    # ... then a learning rate that blows the weights up within a few steps
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        train.main([*common, "--max_iters=200", "--init_from=resume", "--learning_rate=1e12", "--warmup_iters=0",
                    "--grad_clip=0.0"])
    assert stop.value.code == 1 and "non-finite" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["finished"] and "non-finite" in summary["stopped_reason"]
    kept = torch.load(out / "ckpt.pt", map_location="cpu", weights_only=False)  # the last good one is kept
    assert kept["iter_num"] == 4 and all(torch.equal(kept["model"][k], good[k]) for k in good)


def test_wandb_offline_logging(data_dir, tmp_path):
    """--wandb_log=True imports wandb lazily and logs offline (WANDB_MODE=offline, no network)."""
    pytest.importorskip("wandb")
    out = tmp_path / "wb"
    env_extra = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}
    proc = subprocess.run([sys.executable, "train.py", *TINY, *FAMILIES["mha"], f"--data_dir={data_dir}",
                           f"--out_dir={out}", "--max_iters=4", "--eval_interval=2", "--wandb_log=True",
                           "--save_checkpoint=False"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env_extra})
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb")), "no offline wandb run written"


@pytest.mark.parametrize("wandb_log", [True, False])
def test_wandb_gets_every_log_record_only_when_asked(wandb_log, small_data, tmp_path, monkeypatch):
    """wandb_log=True: one wandb run (wandb_project, wandb_run_name, the config), every log.jsonl record logged at its
    iteration, the run finished at the end. wandb_log=False never touches wandb (a stand-in module here)."""
    calls = []
    fake = SimpleNamespace(init=lambda **kw: calls.append(("init", kw)),
                           log=lambda record, step: calls.append(("log", step, record)),
                           finish=lambda: calls.append(("finish",)))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    out = tmp_path / "run"
    train_in_process([f"--data_dir={small_data}", f"--out_dir={out}", "--max_iters=2", "--eval_interval=2",
                      f"--wandb_log={wandb_log}", "--wandb_project=proj", "--wandb_run_name=name"])
    if not wandb_log:
        assert calls == []
        return
    (init, kw), *logged, finish = calls
    assert init == "init" and (kw["project"], kw["name"], kw["config"]["max_iters"]) == ("proj", "name", 2)
    assert [(step, record) for _, step, record in logged] == [(r["iter"], r) for r in read_log(out)]
    assert finish == ("finish",)


def test_eval_only_on_a_resumed_checkpoint_evaluates(data_dir, tmp_path):
    import train
    out = tmp_path / "evalonly"
    common = [*TINY, *FAMILIES["tucker"], f"--data_dir={data_dir}", f"--out_dir={out}", "--eval_interval=4"]
    train.main([*common, "--max_iters=4"])
    before = [r for r in read_log(out) if "val_loss" in r]
    train.main([*common, "--init_from=resume", "--eval_only=True"])
    after = [r for r in read_log(out) if "val_loss" in r]
    assert len(after) == len(before) + 1 and after[-1]["iter"] == 4
    assert after[-1]["val_loss"] == before[-1]["val_loss"]  # same weights, same evaluation batches
    # the second record at iteration 4 says it is the evaluation's, not training's
    assert after[-1].get("eval_only") is True and not any("eval_only" in r for r in before)


def test_eval_only_leaves_the_runs_end_as_it_was(data_dir, tmp_path, capsys):
    """An evaluation trains nothing: over a run not at its max_iters the summary says not finished (a sweep reads
    it; it said finished, and the sweep skipped the run), over a finished one finished; an early-stopped run keeps
    its reason; the process exits 0 either way. Resuming the early-stopped run itself does nothing, unless given
    another patience."""
    import train
    out = tmp_path / "e"
    common = [*TINY, *FAMILIES["mha"], f"--data_dir={data_dir}", f"--out_dir={out}", "--eval_interval=2"]
    summary = lambda: json.loads((out / "summary.json").read_text())  # noqa: E731
    train.main([*common, "--max_iters=2"])
    train.main([*common, "--init_from=resume", "--eval_only=True", "--max_iters=6"])  # 2 of 6 trained
    assert (summary()["finished"], summary()["stopped_reason"], summary()["iters"]) == (False, "eval_only", 2)
    train.main([*common, "--init_from=resume", "--max_iters=6"])  # continued to its end
    assert summary()["finished"] and summary()["iters"] == 6
    train.main([*common, "--init_from=resume", "--eval_only=True"])
    assert (summary()["finished"], summary()["stopped_reason"]) == (True, "eval_only")
    stop = tmp_path / "s"  # an early stop: patience 1 and a learning rate that makes val worse
    bad = [*TINY, *FAMILIES["mha"], f"--data_dir={data_dir}", f"--out_dir={stop}", "--eval_interval=2",
           "--patience=1", "--learning_rate=3.0", "--min_lr=0.3", "--max_iters=40", "--always_save_checkpoint=True"]
    train.main(bad)
    first = json.loads((stop / "summary.json").read_text())
    assert first["stopped_reason"].startswith("early stop") and first["finished"], first
    assert first["iters"] == first["best_iter"] + 2  # at the first evaluation (patience 1) after the best one
    train.main([*bad, "--init_from=resume", "--eval_only=True"])
    again = json.loads((stop / "summary.json").read_text())
    assert again["finished"] and again["stopped_reason"] == first["stopped_reason"]
    # a resume of the early-stopped run: nothing to do (it trained on from its checkpoint and stopped again),
    # nothing touched; with another patience it trains on from that checkpoint, its last evaluation's (the message
    # named the best one's)
    log = (stop / "log.jsonl").read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        train.main([*bad, "--init_from=resume"])
    out = capsys.readouterr().out
    at = torch.load(stop / "ckpt.pt", map_location="cpu", weights_only=False)["iter_num"]
    assert at == again["iters"] and at > again["best_iter"]
    assert e.value.code == 0 and "stopped early" in out and f"from its checkpoint at iteration {at})" in out, out
    assert (stop / "log.jsonl").read_text() == log
    train.main([*bad, "--init_from=resume", "--patience=0", f"--max_iters={again['iters'] + 2}"])
    assert json.loads((stop / "summary.json").read_text())["stopped_reason"] == "max_iters"


def test_tokens_count_each_iterations_own_batch_across_a_resume(data_dir, tmp_path, capsys):
    """summary.json's tokens after a resume with another batch size: each iteration counted at its own batch (it
    was iterations x today's batch). A resume past max_iters says it trains nothing."""
    import train
    out = tmp_path / "t"
    common = [*TINY, *FAMILIES["tucker"], f"--data_dir={data_dir}", f"--out_dir={out}", "--eval_interval=2"]
    train.main([*common, "--max_iters=4"])  # batch_size 4, block 32
    train.main([*common, "--init_from=resume", "--max_iters=6", "--batch_size=2"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["iters"] == 6 and summary["tokens"] == 4 * 4 * 32 + 2 * 2 * 32
    capsys.readouterr()
    train.main([*common, "--init_from=resume", "--max_iters=3"])
    assert "is at iteration 6, past max_iters=3: nothing is trained" in capsys.readouterr().err


def test_a_resume_may_change_how_the_model_is_computed(data_dir, tmp_path, capsys):
    """Activation checkpointing, the chunked loss head and the plain GELU at a resume (a run out of memory goes
    on that way): the same weights, so not refused as another model; a model key still is."""
    import train
    out = tmp_path / "c"
    common = [*TINY, *FAMILIES["tucker"], f"--data_dir={data_dir}", f"--out_dir={out}", "--eval_interval=2"]
    train.main([*common, "--max_iters=2"])
    train.main([*common, "--init_from=resume", "--max_iters=4", "--activation_checkpointing=True",
                "--loss_chunk_tokens=64", "--gelu=torch"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["iters"] == 4 and summary["finished"]
    model = summary["model_config"]
    assert (model["activation_checkpointing"], model["loss_chunk_tokens"], model["gelu"]) == (True, 64, "torch")
    capsys.readouterr()
    with pytest.raises(SystemExit):
        train.main([*common, "--init_from=resume", "--max_iters=6", "--n_layer=3"])
    assert "model keys given here differ from it: n_layer=3" in capsys.readouterr().err


def test_errors_come_before_the_note_on_an_earlier_run(data_dir, tmp_path, capsys):
    """A fresh run in a folder holding an earlier one notes that it replaces it, but only once every check passed:
    a run refused (block_size past the data) replaced nothing, and says nothing of it."""
    import train
    out = tmp_path / "n"
    common = [*TINY, *FAMILIES["mha"], f"--data_dir={data_dir}", f"--out_dir={out}"]
    train.main([*common, "--max_iters=1", "--eval_interval=1"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        train.main([*common, "--max_iters=1", "--block_size=10000000"])
    err = capsys.readouterr().err
    assert "error:" in err and "note:" not in err, err
    assert (out / "ckpt.pt").exists()


def test_wandb_log_without_wandb_installed_is_one_line(data_dir, tmp_path, capsys, monkeypatch):
    """--wandb_log=True without wandb installed: one `error:` line saying what to install (exit 2), before the folder
    is touched; it was a ModuleNotFoundError traceback."""
    import train
    monkeypatch.setitem(sys.modules, "wandb", None)  # None: an import of it fails, as when it is not installed
    out = tmp_path / "w"
    with pytest.raises(SystemExit) as e:
        train.main([*TINY, *FAMILIES["mha"], f"--data_dir={data_dir}", f"--out_dir={out}", "--max_iters=1",
                    "--wandb_log=True"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith("error: wandb_log=True, but wandb is not installed: pip install wandb")
    assert "\n" not in err and not (out / "ckpt.pt").exists(), err


def test_a_wandb_that_cannot_start_touches_nothing(data_dir, tmp_path, capsys, monkeypatch):
    """wandb.init failing (no API key, say) is one line, before an earlier run's checkpoint is set aside and its log
    emptied (they were, and its resume then found no checkpoint)."""
    wandb = pytest.importorskip("wandb")
    import train
    out = tmp_path / "w"
    common = [*TINY, *FAMILIES["mha"], f"--data_dir={data_dir}", f"--out_dir={out}", "--eval_interval=1"]
    train.main([*common, "--max_iters=1"])
    log = (out / "log.jsonl").read_text()

    def no_key(**kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty)")

    monkeypatch.setattr(wandb, "init", no_key)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        train.main([*common, "--max_iters=2", "--wandb_log=True"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "wandb.init failed (UsageError: api_key not configured" in err, err
    assert (out / "ckpt.pt").exists() and not (out / "ckpt.earlier.pt").exists()
    assert (out / "log.jsonl").read_text() == log


def test_sample_from_trained_checkpoint(data_dir, tmp_path, gpt2_ranks_file, capsys):
    """sample.py on what train.py wrote (both run in this process: no interpreter start per command)."""
    import sample
    import train
    out = tmp_path / "run"
    train.main([*TINY, *FAMILIES["mla"], f"--data_dir={data_dir}", f"--out_dir={out}", "--max_iters=10",
                "--eval_interval=10"])

    def sample_out(args):
        capsys.readouterr()
        sample.main(args)
        return capsys.readouterr().out
    common = [f"--out_dir={out}", "--device=cpu", f"--tokenizer={gpt2_ranks_file}", "--num_samples=1",
              "--max_new_tokens=20", "--temperature=0", "--start=ROMEO:"]
    cached = sample_out([*common, "--use_cache=True"])
    uncached = sample_out([*common, "--use_cache=False"])
    assert cached == uncached and cached.startswith("ROMEO:") and len(cached) > len("ROMEO:")
    sampled = sample_out([f"--out_dir={out}", "--device=cpu", f"--tokenizer={gpt2_ranks_file}",
                          "--num_samples=2", "--max_new_tokens=10", "--temperature=1.0", "--seed=7"])
    assert sampled.count("---------------") == 2
    # a clear error for a prompt longer than the context (bad keys and checkpoints: tests/test_sample.py)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        sample.main([*common, "--start=" + "word " * 40])
    assert e.value.code == 2 and "block_size" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# In-process checks on a 1-layer model over random tokens (vocab 64): every invalid input is one
# line `error: ...` and exit 2 before anything is built or written; resume keeps its records straight.

SMALL = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--vocab_size=64", "--batch_size=2",
         "--bias=False", "--device=cpu", "--compile=False", "--eval_iters=2", "--log_interval=1",
         "--warmup_iters=0", "--lr_decay_iters=8", "--learning_rate=1e-3"]


def train_in_process(args):
    import train
    train.main([*SMALL, *args])


def train_error(args, capsys) -> str:
    """train.main(args) must exit 2 with one line `error: ...` on stderr; returns that line."""
    import train
    from tiny import one_line_error
    return one_line_error(lambda: train.main([*SMALL, *args]), capsys)


@pytest.mark.parametrize("arg,key", [
    ("--learning_rate=-1e-3", "learning_rate"), ("--min_lr=-1e-5", "min_lr"), ("--beta1=1.0", "beta1"),
    ("--beta2=-0.1", "beta2"), ("--batch_size=0", "batch_size"), ("--batch_size=-4", "batch_size"),
    ("--eval_interval=0", "eval_interval"), ("--log_interval=0", "log_interval"),
    ("--gradient_accumulation_steps=0", "gradient_accumulation_steps"), ("--max_iters=-1", "max_iters"),
    ("--eval_iters=0", "eval_iters"), ("--device=tpu", "device"), ("--device=cuda:x", "device"),
    ("--dtype=float8", "dtype"), ("--weight_decay=-0.1", "weight_decay"), ("--grad_clip=-1.0", "grad_clip"),
    ("--compile_mode=fast", "compile_mode"), ("--compile_mode=max-autotune", "compile=True"),
    ("--seed=-1", "seed="), ("--seed=99999999999999999999", "seed="),
    ("--learning_rate=1e999", "learning_rate=inf"), ("--weight_decay=1e999", "weight_decay=inf"),  # inf: was taken
    ("--grad_clip=1e999", "grad_clip=inf"), ("--peak_tflops=1e999", "peak_tflops=inf"),
])
def test_invalid_training_keys_fail_before_anything(arg, key, small_data, tmp_path, capsys):
    out = tmp_path / "never"
    err = train_error([f"--data_dir={small_data}", f"--out_dir={out}", "--max_iters=2", arg], capsys)
    assert key in err and "allowed" in err, err
    assert not out.exists()


@pytest.mark.parametrize("change", [
    dict(beta1=0.0), dict(beta2=0.0),  # [0, 1): no momentum is a setting
    dict(learning_rate=6e-4, min_lr=6e-4),  # min_lr <= learning_rate: a flat schedule
    dict(warmup_iters=100, lr_decay_iters=100),  # lr_decay_iters >= warmup_iters: the warmup, then min_lr
    dict(seed=0), dict(seed=2**63 - 1),
    dict(max_iters=0, warmup_iters=0, lr_decay_iters=0, patience=0, grad_clip=0.0, weight_decay=0.0, min_lr=0.0),
    dict(batch_size=1, gradient_accumulation_steps=1, eval_interval=1, log_interval=1, eval_iters=1),
    dict(dataset="", data_dir="some/folder"),  # data_dir alone names the data
    dict(peak_tflops=1e-3), dict(backend="gloo"), dict(fsdp=True, dtype="bfloat16", device="cpu"),
])
def test_the_closed_end_of_each_allowed_range_passes(change):
    """validate_train_config allows each range's own end (test_one_step_past_each_allowed_range_is_refused: what lies
    past it is refused)."""
    from train_config import TRAIN_DEFAULTS, validate_train_config
    validate_train_config({**TRAIN_DEFAULTS, **change})


@pytest.mark.parametrize("change,key", [
    (dict(seed=2**63), "seed=9223372036854775808"), (dict(peak_tflops=0.0), "peak_tflops=0.0"),
    (dict(patience=-1), "patience=-1"), (dict(beta2=1.0), "beta2=1.0"), (dict(beta1=-1e-9), "beta1="),
    (dict(learning_rate=math.nan), "learning_rate=nan"), (dict(min_lr=math.nan), "min_lr=nan"),
    (dict(warmup_iters=101, lr_decay_iters=100), "lr_decay_iters=100"),
    (dict(learning_rate=1e-3, min_lr=1.001e-3), "min_lr=0.001001"),
    (dict(backend="mpi"), "backend='mpi'"), (dict(out_dir=""), "out_dir=''"), (dict(dataset="", data_dir=""), "dataset=''"),
    (dict(fsdp=True, dtype="float16", device="cpu"), "fsdp=True with dtype='float16'"),
    (dict(fsdp=True, device="mps"), "fsdp=True on device='mps'"),
])
def test_one_step_past_each_allowed_range_is_refused(change, key, monkeypatch):
    """Just past each range's end: a ValueError naming the key and its value (an Apple GPU stands in as available,
    so that FSDP's own refusal of it is what answers)."""
    from train_config import TRAIN_DEFAULTS, validate_train_config
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    with pytest.raises(ValueError) as e:
        validate_train_config({**TRAIN_DEFAULTS, **change})
    assert key in str(e.value), str(e.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda(small_data, tmp_path, capsys):
    err = train_error([f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}", "--max_iters=2", "--device=cuda"], capsys)
    assert "device='cuda'" in err and "CUDA is not available" in err


@pytest.mark.parametrize("damage", ["odd_length", "empty", "out_of_vocab", "shorter_than_block"])
def test_bad_token_files(damage, small_data, tmp_path, capsys):
    import numpy as np
    path = small_data / ("val.bin" if damage == "shorter_than_block" else "train.bin")
    if damage == "odd_length":
        path.write_bytes(path.read_bytes() + b"\x01")
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "out_of_vocab":
        tokens = np.fromfile(path, dtype=np.uint16)
        tokens[1234] = 64  # vocab_size is 64: ids 0..63
        tokens.tofile(path)
    else:
        np.arange(10, dtype=np.uint16).tofile(path)  # 10 tokens, block_size 16
    before = path.read_bytes()
    out = tmp_path / "never"
    err = train_error([f"--data_dir={small_data}", f"--out_dir={out}", "--max_iters=2"], capsys)
    assert str(path) in err, err
    said = err.replace(str(path), "<path>")  # the path holds the case's name ('empty'): not what is said about it
    assert {"odd_length": "bytes, not a whole number", "empty": "is empty: re-run the dataset's prepare.py",
            "out_of_vocab": "token id 64", "shorter_than_block": "fewer than block_size + 2"}[damage] in said, err
    assert not out.exists() and path.read_bytes() == before


def test_token_files_of_another_dtype_are_refused(small_data, tmp_path, capsys):
    """A prepare's meta.json that records another token dtype (uint32 ids for a large vocabulary: read as uint16
    they are two small ids each, which every other check accepts) is refused before training; uint16 passes."""
    import json
    (small_data / "meta.json").write_text(json.dumps({"dtype": "uint16", "vocab_size": 64}))
    import train
    train.configure([*SMALL, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}", "--max_iters=1"])
    (small_data / "meta.json").write_text(json.dumps({"dtype": "uint32", "vocab_size": 100277}))
    err = train_error([f"--data_dir={small_data}", f"--out_dir={tmp_path / 'never'}", "--max_iters=2"], capsys)
    assert "meta.json says its token files hold uint32" in err, err


def test_token_id_check_is_fast_on_100M_tokens(tmp_path):
    import numpy as np
    from evaluate import check_token_file
    path = tmp_path / "big.bin"
    tokens = np.zeros(100_000_000, dtype=np.uint16)
    tokens[-1] = 50303
    tokens.tofile(path)
    t0 = time.perf_counter()
    assert check_token_file(str(path), 50304, 1024) == 100_000_000
    assert time.perf_counter() - t0 < 2.0
    with pytest.raises(ValueError, match="position 99,999,999"):
        check_token_file(str(path), 50257, 1024)


@pytest.mark.parametrize("where", ["a_file", "under_a_file", "a_nul_byte"])
def test_impossible_out_dir(where, small_data, tmp_path, capsys):
    """out_dir a file, under a file, or a path no file system takes (a NUL byte, from a config file): one line."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("keep me")
    out = {"a_file": blocker, "under_a_file": blocker / "run", "a_nul_byte": f"{tmp_path}/bad\x00name"}[where]
    config = tmp_path / "config.py"
    config.write_text(f"out_dir = {str(out)!r}\n")
    err = train_error([f"--data_dir={small_data}", str(config), "--max_iters=1"], capsys)
    assert f"out_dir={str(out)!r}" in err, err
    assert blocker.read_text() == "keep me"


def test_config_file_errors_are_one_line(small_data, tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("batch_size = 4\nlearning_rate = 1e-3 *\n")
    err = train_error([str(bad), f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}"], capsys)
    assert f"{bad}, line 2" in err and "SyntaxError" in err
    bad.write_text("batch_size = 4\nimport math\nlearning_rate = math.log(0)\n")
    err = train_error([str(bad), f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}"], capsys)
    assert f"{bad}, line 3" in err and "ValueError" in err


def test_an_interrupted_run_says_how_it_goes_on(small_data, tmp_path, monkeypatch, capsys):
    """Ctrl-C in the loop (here at iteration 3, after the checkpoint of iteration 2): main says where the run stopped
    and how it continues, then raises KeyboardInterrupt on (an in-process caller sees it; the script ends by SIGINT:
    the SIGUSR1 test above); before any checkpoint it says a run again starts over."""
    import train
    step = train.train_step

    def interrupt_at_3(run, *args, **kwargs):
        if run.state.iter_num == 3:
            raise KeyboardInterrupt
        return step(run, *args, **kwargs)

    monkeypatch.setattr(train, "train_step", interrupt_at_3)
    out = tmp_path / "run"
    for eval_interval, expected in ((2, f"interrupted at iteration 3: `python train.py <the same arguments> "
                                        f"--init_from=resume` continues from its last checkpoint, {out / 'ckpt.pt'}"),
                                    (8, "interrupted at iteration 3: no checkpoint was written yet: running it again "
                                        "starts over")):
        with pytest.raises(KeyboardInterrupt):
            train_in_process([f"--data_dir={small_data}", f"--out_dir={out}", "--max_iters=8",
                              f"--eval_interval={eval_interval}", "--always_save_checkpoint=True"])
        assert capsys.readouterr().err.splitlines()[-1] == expected
        if eval_interval == 2:
            assert torch.load(out / "ckpt.pt", weights_only=False)["iter_num"] == 2
            (out / "ckpt.pt").unlink()


@pytest.fixture
def small_run(small_data, tmp_path):
    """A finished 4-iteration run with a checkpoint at iteration 4: (args, out_dir)."""
    out = tmp_path / "run"
    args = [f"--data_dir={small_data}", f"--out_dir={out}", "--max_iters=4", "--eval_interval=4"]
    train_in_process(args)
    return args, out


@pytest.mark.parametrize("damage", ["empty", "truncated", "foreign"])
def test_resume_from_an_unreadable_checkpoint(damage, small_run, capsys):
    args, out = small_run
    ckpt = out / "ckpt.pt"
    good = ckpt.read_bytes()
    ckpt.write_bytes({"empty": b"", "truncated": good[: len(good) // 3], "foreign": b"PK\x03\x04 not really"}[damage])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    err = train_error([*args, "--init_from=resume", "--max_iters=8"], capsys)
    assert str(ckpt) in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing touched


@pytest.mark.parametrize("key", ["optimizer", "iter_num"])
def test_resume_from_a_checkpoint_without_training_state_is_one_line(key, small_run, capsys):
    """A checkpoint that can be sampled from but lacks what a resume continues (the optimizer's state, the iteration,
    the best evaluation so far): refused before anything is built, one line naming what is missing, nothing touched."""
    from checkpoint import save_checkpoint
    args, out = small_run
    ckpt = torch.load(out / "ckpt.pt", weights_only=False)
    del ckpt[key]
    save_checkpoint(out / "ckpt.pt", ckpt)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    err = train_error([*args, "--init_from=resume", "--max_iters=8"], capsys)
    assert f"missing {key}" in err and str(out / "ckpt.pt") in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_non_finite_evaluation_stops_before_its_checkpoint(small_data, tmp_path, capsys):
    """Weights that turn non-finite between log lines (no log line before the next evaluation) are caught by that
    evaluation: the run stops there (exit 1) and does not checkpoint them; the last good checkpoint is kept."""
    import train
    out = tmp_path / "run"
    args = [f"--data_dir={small_data}", f"--out_dir={out}", "--eval_interval=2"]
    train_in_process([*args, "--max_iters=2"])
    good = torch.load(out / "ckpt.pt", map_location="cpu", weights_only=False)["model"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:  # one step at this rate makes the loss of the next one NaN
        train.main([*SMALL, *args, "--init_from=resume", "--max_iters=6", "--log_interval=100", "--learning_rate=1e12",
                    "--decay_lr=False", "--grad_clip=0.0"])
    assert stop.value.code == 1 and "non-finite eval loss at iter 4" in capsys.readouterr().err
    kept = torch.load(out / "ckpt.pt", map_location="cpu", weights_only=False)
    assert kept["iter_num"] == 2 and all(torch.equal(kept["model"][k], good[k]) for k in good)


def test_resume_refuses_model_keys_that_differ_from_the_checkpoint(small_run, capsys):
    args, out = small_run
    err = train_error([*args, "--init_from=resume", "--n_embd=32", "--max_iters=8"], capsys)
    assert "n_embd=32" in err and "checkpoint: 16" in err
    train_in_process([*args, "--init_from=resume", "--n_embd=16", "--max_iters=5"])  # the same value is fine


def test_resume_drops_log_records_of_redone_iterations(small_run):
    args, out = small_run
    log = out / "log.jsonl"
    ghost = [{"iter": 5, "loss": 99.0}, {"iter": 6, "loss": 99.0}]  # written after ckpt.pt, then killed
    with open(log, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in ghost) + '{"iter": 7, "lo')  # and a line cut short
    stale = out / "ckpt.pt.tmp.999999999"  # a temp file a killed save left behind
    stale.write_bytes(b"partial")
    # removed as the run starts, not only by a save's clean-up (this one saves none)
    train_in_process([*args, "--init_from=resume", "--max_iters=8", "--eval_interval=4", "--save_checkpoint=False"])
    records = read_log(out)
    train_iters = [r["iter"] for r in records if "loss" in r]
    eval_iters = [r["iter"] for r in records if "val_loss" in r]
    assert train_iters == list(range(1, 9)) and eval_iters == [0, 4, 8]
    assert all(r.get("loss") != 99.0 for r in records)
    assert not stale.exists()


def test_resuming_a_finished_run_keeps_its_summary(small_run, capsys):
    """A run leaves its four files in out_dir and nothing else (the write check's probe is gone). Resuming it at its
    max_iters trains nothing, says nothing of a checkpoint past max_iters (it is at it), and keeps its summary."""
    args, out = small_run
    assert sorted(p.name for p in out.iterdir()) == ["ckpt.pt", "config.json", "log.jsonl", "summary.json"]
    first = json.loads((out / "summary.json").read_text())
    assert first["final_val_loss"] is not None
    capsys.readouterr()
    train_in_process([*args, "--init_from=resume"])
    assert "past max_iters" not in capsys.readouterr().err
    again = json.loads((out / "summary.json").read_text())
    assert again["finished"] and again["iters"] == 4
    assert again["final_val_loss"] == first["final_val_loss"] and again["best_val_loss"] == first["best_val_loss"]


def test_each_rank_resumes_its_own_dropout_stream(small_run):
    """A checkpoint keeps every DDP rank's RNG state; rank r continues its own (not a reseed)."""
    import train
    from checkpoint import read_checkpoint
    args, out = small_run
    ckpt = read_checkpoint(out / "ckpt.pt")
    assert len(ckpt["rng_states"]) == 1  # one process wrote it
    rank1 = torch.Generator().manual_seed(12345).get_state()
    ckpt["rng_states"].append({"torch": rank1, "cuda": None})
    cfg, gptconf, _ = train.configure([*SMALL, *args, "--init_from=resume"])
    env = train.Env(ddp=False, rank=1, local_rank=1, world=2, device=torch.device("cpu"), dtype="float32",
                    autocast=train.nullcontext(), data_dir=cfg["data_dir"], out_dir=str(out))
    train.build(cfg, gptconf, ckpt, env)
    assert torch.equal(torch.get_rng_state(), rank1)


def test_each_rank_starts_its_own_dropout_stream_from_the_same_weights(small_data, tmp_path):
    """A fresh run: every rank builds the same initial weights (FSDP shards them, DDP relies on them) and seeds a
    dropout stream of its own (the same masks on every rank would correlate their noise)."""
    import train
    cfg, gptconf, _ = train.configure([*SMALL, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}", "--dropout=0.1"])
    built = []
    for rank in (0, 1):
        env = train.Env(ddp=False, rank=rank, local_rank=rank, world=2, device=torch.device("cpu"), dtype="float32",
                        autocast=train.nullcontext(), data_dir=cfg["data_dir"], out_dir=str(tmp_path / "o"))
        run = train.build(cfg, gptconf, None, env)
        built.append((run.raw_model.state_dict(), torch.get_rng_state()))
    (w0, rng0), (w1, rng1) = built
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    assert not torch.equal(rng0, rng1)


def record_adamw_steps(monkeypatch) -> list:
    """A list that fills with (learning rate, global gradient norm) as each AdamW.step sees them."""
    seen, step = [], torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.double()) for g in grads]))
        seen.append((self.param_groups[0]["lr"], norm.item()))
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    return seen


def test_each_step_takes_the_scheduled_learning_rate_and_clipped_gradients(small_data, tmp_path, monkeypatch):
    """What AdamW steps with, seen from inside its step: the schedule's learning rate (a linear warmup that starts
    above 0 and reaches learning_rate at warmup_iters, a cosine down to min_lr at lr_decay_iters, min_lr after), the
    rate the iteration's log line reports; gradients clipped to norm grad_clip (this model's are larger than 0.01)."""
    seen = record_adamw_steps(monkeypatch)
    lr, min_lr, warmup, decay, iters = 1e-3, 1e-4, 3, 9, 11
    out = tmp_path / "run"
    train_in_process([f"--data_dir={small_data}", f"--out_dir={out}", f"--max_iters={iters}", "--eval_interval=100",
                      f"--warmup_iters={warmup}", f"--lr_decay_iters={decay}", f"--learning_rate={lr}",
                      f"--min_lr={min_lr}", "--grad_clip=0.01", "--save_checkpoint=False"])
    assert len(seen) == iters
    lrs, norms = [s[0] for s in seen], [s[1] for s in seen]
    logged = {r["iter"]: r["lr"] for r in read_log(out) if "loss" in r}
    assert [logged[it + 1] for it in range(iters)] == lrs  # the line of iteration it + 1: the step from it
    assert norms == pytest.approx([0.01] * iters, rel=1e-4)
    rises = [b - a for a, b in zip(lrs[:warmup], lrs[1:warmup + 1])]
    assert lrs[0] > 0 and rises[0] > 0 and rises == pytest.approx([rises[0]] * warmup)  # linear, from above 0
    assert lrs[warmup] == pytest.approx(lr)
    assert all(a > b for a, b in zip(lrs[warmup:decay], lrs[warmup + 1:decay + 1]))  # decays ...
    assert lrs[(warmup + decay) // 2] == pytest.approx((lr + min_lr) / 2)  # ... as a cosine: half way at the middle
    assert lrs[decay:] == pytest.approx([min_lr] * (iters - decay))


def test_float16_clips_the_unscaled_gradients_and_resumes_its_loss_scale(small_data, tmp_path, monkeypatch):
    """dtype float16 runs with a gradient scaler: the clip applies to the true gradients, unscaled first (clipping the
    scaled ones leaves steps 65,536 times too small once the scaler unscales them); a resume continues the scaler's
    state from the checkpoint, not a fresh scaler's."""
    import train
    seen = record_adamw_steps(monkeypatch)
    args = [*SMALL, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'run'}", "--eval_interval=2", "--eval_iters=1",
            "--dtype=float16", "--grad_clip=0.01"]
    train.main([*args, "--max_iters=2"])
    assert [norm for _, norm in seen] == pytest.approx([0.01, 0.01], rel=1e-3)
    cfg, gptconf, ckpt = train.configure([*args, "--init_from=resume", "--max_iters=4"])
    saved = ckpt["scaler"]
    assert saved and saved != torch.amp.GradScaler("cpu").state_dict()  # two steps moved it on
    assert train.build(cfg, gptconf, ckpt, train.setup(cfg, gptconf)).scaler.state_dict() == saved


def test_mfu_is_per_gpu_and_steady_state():
    import train
    from model import GPT, GPTConfig
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=64))
    one = train.SteadyMFU(model, tokens_per_iter=1000, world=1, peak_flops=1e12, untimed=5)
    two = train.SteadyMFU(model, tokens_per_iter=1000, world=2, peak_flops=1e12, untimed=5)
    for meter in (one, two):
        meter.update(iters_done=1, n=1, seconds=30.0)  # compile
        meter.update(iters_done=5, n=4, seconds=4.0)  # still warm-up
        assert meter.mfu == -1.0
        for i in range(6, 12):
            meter.update(iters_done=i, n=1, seconds=0.5 if i != 9 else 5.0)  # one slow outlier (an eval)
    expected = model.estimate_mfu(1000, 0.5, 1e12)
    assert one.mfu == pytest.approx(expected) and two.mfu == pytest.approx(expected / 2)


def test_torchrun_resume_with_dropout_is_exact(small_data, tmp_path):
    """Two DDP ranks with dropout, stopped at iteration 3 and resumed, end bit-identical to an
    uninterrupted run: every rank continues its own dropout RNG stream."""
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py", *SMALL,
                f"--data_dir={small_data}", "--dropout=0.2", "--gradient_accumulation_steps=2", "--eval_interval=3"]
    ref, part = tmp_path / "ref", tmp_path / "part"
    run([*torchrun, f"--out_dir={ref}", "--max_iters=6"])
    run([*torchrun, f"--out_dir={part}", "--max_iters=3"])
    run([*torchrun, f"--out_dir={part}", "--max_iters=6", "--init_from=resume"])
    a, b = (torch.load(d / "ckpt.pt", map_location="cpu", weights_only=True) for d in (ref, part))
    assert a["iter_num"] == b["iter_num"] == 6 and len(b["rng_states"]) == 2
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert train_losses(ref) == train_losses(part)


@pytest.mark.parametrize("split", [True, False])
def test_ddp_split_graph_reaches_dynamo(split):
    """ddp_split_graph is what Dynamo's DDP optimizer sees when a DDP run compiles (and only a DDP run)."""
    import torch._dynamo
    import train
    from model import GPT, GPTConfig
    before = torch._dynamo.config.optimize_ddp
    try:
        model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32))
        cfg = {**train.DEFAULTS, "ddp_split_graph": split}
        env = train.Env(ddp=True, rank=0, local_rank=0, world=2, device=torch.device("cpu"), dtype="float32",
                        autocast=None, data_dir="", out_dir="")
        compiled = train.compile_model(model, cfg, env)
        assert torch._dynamo.config.optimize_ddp is split and compiled is not model
        torch._dynamo.config.optimize_ddp = before
        train.compile_model(model, cfg, dataclasses.replace(env, ddp=False))  # one process: left alone
        assert torch._dynamo.config.optimize_ddp == before
    finally:
        torch._dynamo.config.optimize_ddp = before


def test_ddp_split_graph_must_be_bool(small_data, tmp_path, capsys):
    err = train_error([f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}", "--ddp_split_graph=maybe"], capsys)
    assert "ddp_split_graph" in err


def one_gloo_rank(monkeypatch) -> None:
    """The environment torchrun gives a job of one process (rank 0 of 1, a free local port): train.py then runs
    DDP over gloo in this process."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)).items():
        monkeypatch.setenv(k, v)


def test_ddp_wrapper_is_gone_before_the_process_group(small_data, tmp_path, monkeypatch):
    """At the end of a DDP run nothing but the registry holds the process group when it is destroyed: DDP's
    reducer holds it from C++ with a destructor that keeps the GIL, and a group torn down there can deadlock
    with gloo's worker threads (a 2-process job hung at main's return). One rank of gloo, in process."""
    import inspect
    import weakref

    import train
    one_gloo_rank(monkeypatch)
    wrappers, alive_at_destroy = [], []

    class RecordedDDP(torch.nn.parallel.DistributedDataParallel):
        __signature__ = inspect.signature(torch.nn.parallel.DistributedDataParallel)  # train.py reads its keywords

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            wrappers.append(weakref.ref(self))

    destroy = torch.distributed.destroy_process_group

    def checked_destroy(*args, **kwargs):
        alive_at_destroy.append(sum(r() is not None for r in wrappers))
        return destroy(*args, **kwargs)

    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", RecordedDDP)
    monkeypatch.setattr(torch.distributed, "destroy_process_group", checked_destroy)
    try:
        train.main([*SMALL, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'out'}", "--max_iters=2",
                    "--eval_interval=2", "--save_checkpoint=False"])
    finally:
        if torch.distributed.is_initialized():
            destroy()
    assert len(wrappers) == 1  # the run was DDP
    assert alive_at_destroy == [0]  # destroyed once, with no DDP wrapper (reducer) left
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["finished"]


def test_ddp_all_reduces_the_gradients_once_an_iteration(small_data, tmp_path, monkeypatch):
    """Under DDP the micro-steps before the last keep their gradients local (no_sync) and the last all-reduces their
    sum: one all-reduce of the (single) gradient bucket per iteration, whatever gradient_accumulation_steps (3 here).
    Nor does DDP broadcast the RoPE tables (buffers) in a forward: a rank without an evaluation batch would never
    join that broadcast (test_torchrun_two_processes_match_single_process). One rank of gloo, in process."""
    import inspect

    import train
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    one_gloo_rank(monkeypatch)
    all_reduces, syncs_buffers = [], []

    def counted(state, bucket):
        all_reduces.append(bucket.index())
        return allreduce_hook(state, bucket)

    class CountedDDP(torch.nn.parallel.DistributedDataParallel):
        __signature__ = inspect.signature(torch.nn.parallel.DistributedDataParallel)  # train.py reads its keywords

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.register_comm_hook(None, counted)
            syncs_buffers.append(self.will_sync_module_buffers())

    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", CountedDDP)
    try:
        train.main([*SMALL, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'out'}", "--max_iters=2",
                    "--eval_interval=2", "--save_checkpoint=False", "--gradient_accumulation_steps=3",
                    "--pos_emb=rope"])
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    assert all_reduces == [0, 0] and syncs_buffers == [False]


def test_compile_options_are_the_modes_plus_ours(monkeypatch):
    """train.py compiles with compile_mode's own inductor options plus model.TRAIN_INDUCTOR_OPTIONS (those this
    torch knows); torch.compile accepts them (it checks names and types when called); an unknown override is a
    ValueError naming it; a key of ours this torch does not know is left out."""
    from torch._inductor import config, list_mode_options

    import model as model_module
    from train import compile_model
    known = config.get_config_copy()
    ours = {k: v for k, v in model_module.TRAIN_INDUCTOR_OPTIONS.items() if k in known}
    assert "triton.mix_order_reduction" in ours  # torch 2.11 (the GPUs) and 2.13 (here) both have the switch
    for mode in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        options = model_module.train_compile_options(mode)
        assert options == {**list_mode_options(mode), **ours}
        torch.compile(lambda x: x + 1, options=options)  # validated here, compiled at a first call (none)
    assert model_module.train_compile_options("default", {"triton.mix_order_reduction": True})[
        "triton.mix_order_reduction"] is True
    with pytest.raises(ValueError, match="'no_such_option'"):
        model_module.train_compile_options("default", {"no_such_option": 1})
    # a switch of ours that this torch does not know (one of a later torch) is left out, not passed on to be refused
    monkeypatch.setitem(model_module.TRAIN_INDUCTOR_OPTIONS, "triton.no_such_switch", False)
    assert model_module.train_compile_options("default") == {**list_mode_options("default"), **ours}
    seen = []
    monkeypatch.setattr(torch, "compile", lambda m, **kw: seen.append(kw) or m)
    compile_model(torch.nn.Linear(2, 2), {"compile_mode": "reduce-overhead", "ddp_split_graph": False},
                  SimpleNamespace(ddp=False, fsdp=False))
    assert seen == [dict(options={"triton.cudagraphs": True, **ours})]


def test_resume_takes_the_runs_keys_from_its_checkpoint(small_data, tmp_path, capsys):
    """`train.py --init_from=resume --out_dir=X` continues the run X holds: its data, batch, schedule, evaluation and
    seed are the checkpoint's (a note lists them), not the defaults, so its losses are the uninterrupted run's; a key
    given here still wins."""
    import train
    run_keys = ["--batch_size=3", "--warmup_iters=2", "--lr_decay_iters=7", "--learning_rate=2e-3", "--min_lr=1e-4",
                "--seed=7", "--eval_interval=3", "--eval_iters=2", f"--data_dir={small_data}"]
    ref, out = tmp_path / "ref", tmp_path / "run"
    train_in_process([f"--out_dir={ref}", "--max_iters=7", *run_keys])
    train_in_process([f"--out_dir={out}", "--max_iters=4", *run_keys])
    capsys.readouterr()
    train.main([f"--out_dir={out}", "--init_from=resume", "--device=cpu", "--compile=False", "--max_iters=7"])
    err = capsys.readouterr().err
    assert "note: resuming with the checkpoint's run keys" in err and "batch_size=3" in err and "seed=7" in err, err
    config = json.loads((out / "config.json").read_text())
    assert (config["batch_size"], config["warmup_iters"], config["lr_decay_iters"], config["seed"], config["max_iters"],
            config["data_dir"]) == (3, 2, 7, 7, 7, str(small_data))
    assert train_losses(out) == train_losses(ref) and len(train_losses(ref)) == 7
    assert [r["iter"] for r in read_log(out) if "val_loss" in r] == [0, 3, 4, 6, 7]  # 4: the first run's end
    best = min((r for r in read_log(out) if "val_loss" in r), key=lambda r: r["val_loss"])  # over both parts
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["best_val_loss"], summary["best_iter"]) == (best["val_loss"], best["iter"])
    train.main([f"--out_dir={out}", "--init_from=resume", "--device=cpu", "--compile=False", "--max_iters=8",
                "--batch_size=2"])  # given: 2, not the checkpoint's 3
    assert json.loads((out / "config.json").read_text())["batch_size"] == 2
    # the keys given are checked against the run's own: its warmup of 2 and learning rate of 2e-3 (they were checked
    # against train.py's defaults, 2,000 and 6e-4, which refused extending the run's schedule)
    train.main([f"--out_dir={out}", "--init_from=resume", "--device=cpu", "--compile=False", "--max_iters=9",
                "--lr_decay_iters=9", "--min_lr=1.5e-3"])
    config = json.loads((out / "config.json").read_text())
    assert (config["warmup_iters"], config["lr_decay_iters"], config["learning_rate"], config["min_lr"]) == \
        (2, 9, 2e-3, 1.5e-3)
    from tiny import one_line_error
    err = one_line_error(lambda: train.main([f"--out_dir={out}", "--init_from=resume", "--device=cpu", "--min_lr=5e-3"]),
                         capsys)
    assert "min_lr=0.005 is out of range: allowed <= learning_rate=0.002" in err and "run keys not given here" in err
    # a key that is wrong whatever the run's keys is named before any checkpoint is read (not 'no checkpoint')
    err = one_line_error(lambda: train.main([f"--out_dir={tmp_path / 'none'}", "--init_from=resume", "--device=cpu",
                                             "--compile_mode=fast"]), capsys)
    assert "compile_mode='fast' is unknown" in err, err


def test_a_fresh_runs_config_holds_the_model_keys_as_a_resumes_does(small_data, tmp_path):
    """config.json, the checkpoint's config and the summary's hold the model keys as the model has them
    (tucker_ranks_post=None as tucker_ranks): they held None on a fresh run and the filled value after a resume of
    the same run."""
    out = tmp_path / "run"
    args = [f"--data_dir={small_data}", f"--out_dir={out}", "--attn=tucker", "--tucker_ranks=2,8,8", "--max_iters=2"]
    train_in_process(args)
    fresh = json.loads((out / "config.json").read_text())
    assert fresh["tucker_ranks_post"] == [2, 8, 8]
    assert json.loads((out / "summary.json").read_text())["config"]["tucker_ranks_post"] == [2, 8, 8]
    # the dtype the run computed in, not the key's '' (which a table could not tell apart from bf16 on a GPU)
    assert fresh["dtype"] == json.loads((out / "summary.json").read_text())["config"]["dtype"] == "float32"
    # tucker_ranks_post=None given is the same model (the post ranks as tucker_ranks): not refused as another
    train_in_process([*args, "--init_from=resume", "--max_iters=3", "--tucker_ranks_post=None"])
    resumed = json.loads((out / "config.json").read_text())
    assert {k: v for k, v in resumed.items() if k not in ("init_from", "max_iters")} == \
        {k: v for k, v in fresh.items() if k not in ("init_from", "max_iters")}


def test_more_processes_than_gpus_is_one_line(monkeypatch, capsys):
    """torchrun's process 1 of a node with one visible GPU: one error line naming --nproc_per_node (it was CUDA's
    'invalid device ordinal' traceback from that rank)."""
    import train
    from tiny import one_line_error
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(train, "check_device", lambda name: "cuda")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(train, "make_current", lambda device: pytest.fail("a device was made current"))
    err = one_line_error(lambda: train.setup(dict(train.DEFAULTS, device="cuda"), None), capsys)
    assert "process 1 of this node on cuda:1, but 1 GPU(s) are visible: give --nproc_per_node at most 1" in err
    monkeypatch.setenv("RANK", "2")  # the processes after the first without a GPU exit too, without a line of their own
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    waited = []
    monkeypatch.setattr(train.time, "sleep", waited.append)
    with pytest.raises(SystemExit) as e:
        train.setup(dict(train.DEFAULTS, device="cuda"), None)
    assert e.value.code == 2 and capsys.readouterr().err == ""
    assert waited == [train.SILENT_FAIL_DELAY_S]  # it ends after the process that says why (torchrun stops the rest)


@pytest.mark.parametrize("says", [True, False])
def test_fail_says_or_waits_and_exits_with_its_code(says, monkeypatch, capsys):
    """fail(): the process that says why prints one line at once; a silent one prints nothing and ends later; both
    exit with the code given (1 for a run stopped in training, as the end of a run under torchrun calls it)."""
    import train
    waited = []
    monkeypatch.setattr(train.time, "sleep", waited.append)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        train.fail("non-finite training loss", says=says, code=1)
    assert e.value.code == 1
    assert capsys.readouterr().err == ("error: non-finite training loss\n" if says else "")
    assert waited == ([] if says else [train.SILENT_FAIL_DELAY_S])


@pytest.mark.parametrize("rank,local_rank", [(None, None), ("0", "0"), ("1", "1"), ("3", "0")])
def test_a_bad_key_under_torchrun_is_said_once_a_node(rank, local_rank, monkeypatch, capsys):
    """A bad key stops every process (exit 2), and one line comes from the node's first process (or the only one):
    torchrun's processes all meet the same key, and used to print the same line each. The first process of the
    second node (RANK 3, LOCAL_RANK 0) says it too: that node's own log has the line."""
    import train
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    if local_rank is not None:
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("LOCAL_RANK", local_rank)
        monkeypatch.setenv("WORLD_SIZE", "6")
    waited = []
    monkeypatch.setattr(train.time, "sleep", waited.append)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        train.configure(["--n_layer=0"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    if local_rank == "1":  # silent, and ending after the process that says why: torchrun stops the others when
        assert err == "" and waited == [train.SILENT_FAIL_DELAY_S]  # one ends, which could stop it before it said
    else:
        assert err.startswith("error: ") and "n_layer" in err and len(err.splitlines()) == 1, err
        assert waited == []


def test_eval_only_resume_between_evaluations_evaluates(small_data, tmp_path):
    """eval_only=True on a checkpoint whose iteration is no multiple of eval_interval, with max_iters beyond it:
    it evaluates there, once, and the summary holds that loss (and says the run is not finished: 3 of 10); it writes
    no checkpoint (whose config would hold this evaluation's keys). The training run logged its last iteration, no
    multiple of log_interval, too."""
    out = tmp_path / "run"
    args = [f"--data_dir={small_data}", f"--out_dir={out}", "--eval_interval=2"]
    train_in_process([*args, "--max_iters=3", "--log_interval=2"])
    assert [r["iter"] for r in read_log(out) if "loss" in r] == [2, 3]
    before = [r for r in read_log(out) if "val_loss" in r]
    ckpt = (out / "ckpt.pt").read_bytes()
    train_in_process([*args, "--init_from=resume", "--eval_only=True", "--max_iters=10", "--eval_iters=5"])
    assert (out / "ckpt.pt").read_bytes() == ckpt
    after = [r for r in read_log(out) if "val_loss" in r]
    assert [r["iter"] for r in after] == [r["iter"] for r in before] + [3]
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["finished"] and summary["final_val_loss"] == after[-1]["val_loss"]


def test_resuming_a_finished_run_keeps_its_timing(small_data, tmp_path, monkeypatch):
    """A resume that trains no iteration (the run had finished) keeps the summary's ms_per_iter, which the run
    measured after its first UNTIMED_ITERS iterations."""
    import train
    timers = []

    class RecordedTimer(train.PhaseTimer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            timers.append(self)

    monkeypatch.setattr(train, "PhaseTimer", RecordedTimer)
    out = tmp_path / "run"
    args = [f"--data_dir={small_data}", f"--out_dir={out}", "--eval_interval=4", f"--max_iters={train.UNTIMED_ITERS + 3}"]
    train_in_process(args)
    assert len(timers) == 1 and len(timers[0].samples["total"]) == 3  # the iterations after the untimed ones
    first = json.loads((out / "summary.json").read_text())["ms_per_iter"]
    assert first["total"] is not None
    train_in_process([*args, "--init_from=resume"])
    assert json.loads((out / "summary.json").read_text())["ms_per_iter"] == first


@pytest.mark.parametrize("args,key", [(["--warmup_iters=5", "--lr_decay_iters=3"], "lr_decay_iters=3"),
                                      (["--min_lr=1e-2"], "min_lr=0.01")])
def test_a_schedule_that_cannot_be_followed_is_refused(args, key, small_data, tmp_path, capsys):
    """Warmup past the decay's end, or a min_lr above learning_rate (1e-3 here): the schedule would jump or rise.
    decay_lr=False runs them: every iteration at learning_rate."""
    out = tmp_path / "never"
    err = train_error([f"--data_dir={small_data}", f"--out_dir={out}", "--max_iters=2", *args], capsys)
    assert key in err and "allowed" in err, err
    train_in_process([f"--data_dir={small_data}", f"--out_dir={out}", "--max_iters=1", "--decay_lr=False", *args])
    assert {r["lr"] for r in read_log(out)} == {1e-3}


def test_scratch_into_a_trained_out_dir(small_data, tmp_path, capsys):
    """eval_only=True with init_from='scratch' where out_dir holds a checkpoint would evaluate a new random model
    and replace the run's log and summary: refused, one line, nothing touched; a training run from scratch there
    is a choice (a sweep restarts unfinished runs so) and says what it replaces."""
    out = tmp_path / "run"
    args = [f"--data_dir={small_data}", f"--out_dir={out}", "--eval_interval=2"]
    train_in_process([*args, "--max_iters=4"])
    records = {name: (out / name).read_bytes() for name in ("log.jsonl", "summary.json", "ckpt.pt", "config.json")}
    err = train_error([*args, "--eval_only=True"], capsys)
    assert "eval_only=True" in err and "--init_from=resume" in err, err
    assert {name: (out / name).read_bytes() for name in records} == records
    train_in_process([*args, "--max_iters=2"])
    assert "holds an earlier run; this one starts from scratch" in capsys.readouterr().err
    assert len(read_log(out)) < records["log.jsonl"].count(b"\n")  # the log restarted with the new run
    assert [r["iter"] for r in read_log(out) if "val_loss" in r] == [0, 2]  # its own iteration 0, once
    # the earlier run's checkpoint and summary set aside as the run started, with its log emptied
    assert (out / "ckpt.earlier.pt").read_bytes() == records["ckpt.pt"]
    assert (out / "summary.earlier.json").read_bytes() == records["summary.json"]
    # a scratch run stopped before its first save: no checkpoint to resume (not the earlier run's under this log),
    # no summary that says the folder holds a finished run
    train_in_process([*args, "--max_iters=1", "--save_checkpoint=False"])
    assert not (out / "ckpt.pt").exists() and (out / "ckpt.earlier.pt").exists()
    (out / "summary.json").unlink()  # as a kill before the end leaves it
    err = train_error([*args, "--init_from=resume"], capsys)
    assert "ckpt.pt does not exist" in err and "ckpt.earlier.pt is the run before" in err, err


@pytest.mark.parametrize("args,key", [
    (["--mla_rope=latent"], "mla_rope"), (["--attn=tucker", "--tucker_ranks=(2,4,4)", "--mla_rope=latent"], "mla_rope"),
    (["--rope_theta=500000.0"], "rope_theta"), (["--mlp_multiple_of=7"], "mlp_multiple_of"),
    (["--mlp=swiglu", "--mlp_hidden=48", "--mlp_multiple_of=7"], "mlp_multiple_of")])
def test_model_keys_this_model_never_reads(args, key, small_data, tmp_path, capsys):
    """A model key on the command line that the configured model never reads (it would change nothing) is one line
    naming it, before anything is written; set to its default, or by a config file, it passes."""
    out = tmp_path / "never"
    err = train_error([f"--data_dir={small_data}", f"--out_dir={out}", "--max_iters=0", *args], capsys)
    assert f"error: {key}=" in err and "has no effect on this model" in err, err
    assert not out.exists()


@pytest.mark.parametrize("args,key", [
    (["--attn=tucker", "--tucker_ranks=(2,4,4)", "--mla_rope_kernels=torch"], "mla_rope_kernels"),
    (["--attn=mla", "--kv_rank=8", "--pos_emb=rope", "--mla_rope=latent", "--mla_rope_kernels=torch"],
     "mla_rope_kernels"), (["--mlp=swiglu", "--gelu=torch"], "gelu")])
def test_implementation_keys_this_model_never_reads_are_a_note(args, key, small_data, tmp_path, capsys):
    """How a part is computed ('torch' for every variant: a plain reference run) is a note where the part is absent."""
    import train
    capsys.readouterr()
    train.configure([*SMALL, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}", "--max_iters=0", *args])
    err = capsys.readouterr().err
    assert f"note: {key}=" in err and "has no effect on this model" in err, err


def test_a_resume_notes_the_implementation_keys_its_model_never_reads(small_data, tmp_path, capsys):
    """A resume may change how the model is computed (COMPUTE_KEYS); one of those keys that the model never reads is
    a note there too (a resume said nothing), and one it reads is not."""
    import train
    args = [*SMALL, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}", "--attn=tucker", "--tucker_ranks=(2,4,4)"]
    train_in_process([*args, "--max_iters=1"])
    capsys.readouterr()
    train.configure([*args, "--init_from=resume", "--max_iters=2", "--mla_rope_kernels=torch"])
    err = capsys.readouterr().err
    assert "note: mla_rope_kernels='torch' has no effect on this model" in err, err
    train.configure([*args, "--init_from=resume", "--max_iters=2", "--gelu=torch"])  # Tucker's MLP is GELU's
    assert "has no effect" not in capsys.readouterr().err


def test_every_sweep_command_sets_only_keys_its_model_reads():
    """The tables' runs (scripts.sweep's commands, every table, both RoPE settings) give train.py no command-line key
    that their model never reads: the check refuses none of them (their files may set such keys: a latent-RoPE MLA
    row's file run with --pos_emb=learned)."""
    import train
    from configurator import parse_config
    from model import GPTConfig
    from scripts import sweep
    from scripts.paper_tables import TABLES
    n = 0
    for table in TABLES:
        for name, _, cmd in sweep.plan(table):
            argv = cmd[2:]  # after the interpreter and train.py
            cfg = parse_config(argv, train.DEFAULTS)
            gptconf = GPTConfig(**{k: cfg[k] for k in train.MODEL_DEFAULTS})
            assert train.inert_on_command_line(argv, cfg, gptconf) == [], (table, name)
            n += 1
    assert n >= 89  # every run of the four tables


def test_model_keys_read_or_from_a_file_pass(small_data, tmp_path, capsys):
    import train
    base = [*SMALL, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}", "--max_iters=0"]
    capsys.readouterr()
    cfg, gptconf, _ = train.configure([*base, "--pos_emb=rope", "--rope_theta=500000.0", "--gelu=torch"])
    assert "no effect" not in capsys.readouterr().err
    assert gptconf.rope_theta == 500000.0 and gptconf.gelu == "torch"
    cfg, gptconf, _ = train.configure([*base, "--rope_theta=10000.0"])  # the default: nothing to say
    rows = tmp_path / "rows.py"
    rows.write_text("mla_rope = 'latent'\nrope_theta = 500000.0\n")  # a file serving rows of several kinds
    cfg, gptconf, _ = train.configure([str(rows), *base])
    assert gptconf.attn == "mha" and gptconf.pos_emb == "learned"


def test_resumed_run_clock_goes_on_from_its_checkpoint(small_run):
    """A resumed run's elapsed_s (log) and wall_time_s (summary) count the training its checkpoint carried (wall_s):
    a run interrupted and resumed reports the wall time of all its iterations, not of its last part."""
    from checkpoint import save_checkpoint
    args, out = small_run
    ckpt = torch.load(out / "ckpt.pt", weights_only=False)
    first = json.loads((out / "summary.json").read_text())
    assert 0 < ckpt["wall_s"] <= first["wall_time_s"]  # the evaluation at iteration 4, then the summary
    ckpt["wall_s"] = 1000.0  # as if the first part had trained for 1000 s
    save_checkpoint(out / "ckpt.pt", ckpt)
    train_in_process([*args, "--init_from=resume", "--max_iters=8"])
    evals = {r["iter"]: r["elapsed_s"] for r in read_log(out) if "val_loss" in r}
    assert evals[4] < 1000.0 <= evals[8]  # the first part's record as it was, the resumed one counted on
    assert json.loads((out / "summary.json").read_text())["wall_time_s"] >= evals[8]


def test_resumed_run_goes_on_counting_evaluations_without_improvement(small_data, tmp_path):
    """Early stopping counts the evaluations since the best one across a resume (the checkpoint's bad_evals): with
    patience 2 and one such evaluation before the checkpoint, the resumed run stops at its next one."""
    from checkpoint import save_checkpoint
    out = tmp_path / "run"
    args = [f"--data_dir={small_data}", f"--out_dir={out}", "--eval_interval=1", "--patience=2"]
    train_in_process([*args, "--max_iters=1"])
    ckpt = torch.load(out / "ckpt.pt", weights_only=False)
    ckpt["best_val_loss"], ckpt["bad_evals"] = 0.0, 1  # as if iteration 1's evaluation had not beaten a best of 0
    save_checkpoint(out / "ckpt.pt", ckpt)
    train_in_process([*args, "--init_from=resume", "--max_iters=4"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_reason"].startswith("early stop") and summary["iters"] == 2, summary["stopped_reason"]


def test_missing_data_names_the_way_to_make_it(tmp_path, capsys):
    """A missing token file names the dataset's prepare command, or, for a dataset the repository cannot prepare
    (the LLaMA table's openwebtext2), says to give --data_dir."""
    err = train_error([f"--data_dir={tmp_path / 'none'}", "--dataset=shakespeare", f"--out_dir={tmp_path / 'o'}"], capsys)
    assert "python -m data.shakespeare.prepare" in err, err
    err = train_error(["--dataset=openwebtext2", f"--out_dir={tmp_path / 'o'}"], capsys)
    assert "no data/openwebtext2/prepare.py" in err and "--data_dir=FOLDER" in err, err


# ---------------------------------------------------------------------------------------
# Processes, dtypes and compile; the batch of an iteration; checkpoint cadence; log lines.

def test_accumulation_steps_that_do_not_divide_among_the_processes_are_one_line(tmp_path, monkeypatch, capsys):
    """gradient_accumulation_steps counts the micro-steps of all DDP processes together: 3 over 2 processes is one
    line naming the key, before the run folder is made or a process group started."""
    import train
    from tiny import one_line_error
    for k, v in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2").items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *a, **kw: pytest.fail("a group was started"))
    out = tmp_path / "never"
    cfg = dict(train.DEFAULTS, device="cpu", out_dir=str(out), gradient_accumulation_steps=3)
    err = one_line_error(lambda: train.setup(cfg, None), capsys)
    assert "gradient_accumulation_steps=3 must be a multiple of the 2 DDP processes" in err, err
    assert not out.exists()


@pytest.mark.parametrize("dtype,computed", [("", torch.float32), ("float32", torch.float32),
                                            ("bfloat16", torch.bfloat16), ("float16", torch.float16)])
def test_each_dtype_computes_in_that_dtype(dtype, computed, tmp_path):
    """dtype is what the forward's matrix products compute in (autocast for bfloat16 and float16; '' is float32 on
    a CPU), and the dtype the run reports."""
    import train
    env = train.setup(dict(train.DEFAULTS, device="cpu", dtype=dtype, out_dir=str(tmp_path / "o")), None)
    with env.autocast:
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == computed
    assert env.dtype == str(computed).removeprefix("torch.")


def test_fsdp_without_torchrun_trains_unsharded(small_data, tmp_path, capsys):
    """fsdp=True in one process (no torchrun): nothing to shard; it says so and trains as any run."""
    out = tmp_path / "run"
    capsys.readouterr()
    train_in_process([f"--data_dir={small_data}", f"--out_dir={out}", "--max_iters=2", "--eval_interval=2",
                      "--fsdp=True"])
    assert "fsdp=True without torchrun: one process, nothing to shard; training unsharded" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and summary["iters"] == 2


def test_compile_runs_the_compiled_model_and_keeps_the_plain_one(small_data, tmp_path, monkeypatch):
    """compile=True: forward and backward run on what torch.compile returns (a stand-in here: inductor takes long on
    a CPU), while the checkpoint and the measurements read the plain GPT; compile=False compiles nothing."""
    import train
    from model import GPT
    compiled = []

    class Compiled(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.inner = model

        def forward(self, *args, **kwargs):
            return self.inner(*args, **kwargs)

    monkeypatch.setattr(torch, "compile", lambda model, **kw: compiled.append(Compiled(model)) or compiled[-1])
    for flag in (False, True):
        cfg, gptconf, _ = train.configure([*SMALL, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}",
                                           f"--compile={flag}"])
        run = train.build(cfg, gptconf, None, train.setup(cfg, gptconf))
        assert type(run.raw_model) is GPT and len(compiled) == int(flag)
        assert run.model is (compiled[0] if flag else run.raw_model)
    assert compiled[0].inner is run.raw_model


@pytest.mark.parametrize("dtype,master", [("float32", False), ("float16", False), ("bfloat16", False),
                                          ("bfloat16", True)])
def test_dtype_and_master_weights_reach_the_optimizer(dtype, master, small_data, tmp_path):
    """The optimizer a run steps with: only float16 scales its loss (GradScaler; bf16 has float32's range);
    master_weights=True is MasterAdamW over bf16 matrices, built for the run's micro-steps (their bf16 gradients
    summed in float32), else AdamW over the float32 weights."""
    import train
    from master_adamw import MasterAdamW
    cfg, gptconf, _ = train.configure([*SMALL, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}",
                                       f"--dtype={dtype}", f"--master_weights={master}",
                                       "--gradient_accumulation_steps=2"])
    run = train.build(cfg, gptconf, None, train.setup(cfg, gptconf))
    assert run.scaler.is_enabled() == (dtype == "float16")
    matrices = {p.dtype for p in run.raw_model.parameters() if p.dim() >= 2}
    if master:
        assert isinstance(run.optimizer, MasterAdamW) and run.optimizer.micro_steps == 2
        assert matrices == {torch.bfloat16}
    else:
        assert type(run.optimizer) is torch.optim.AdamW and matrices == {torch.float32}


def test_a_checkpoint_without_val_loss_and_tokens_resumes_with_them_derived(small_run):
    """A checkpoint from before val_loss and tokens were saved: its last evaluation's loss is its best one's when that
    was at its own iteration, and its tokens are its iterations at its own run's batch (not this resume's)."""
    from checkpoint import save_checkpoint
    args, out = small_run
    first = json.loads((out / "summary.json").read_text())
    ckpt = torch.load(out / "ckpt.pt", weights_only=False)
    assert ckpt["best_iter"] == ckpt["iter_num"] == 4
    del ckpt["val_loss"], ckpt["tokens"]
    save_checkpoint(out / "ckpt.pt", ckpt)
    train_in_process([*args, "--init_from=resume", "--batch_size=1"])  # at its max_iters: nothing trained
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_val_loss"] == first["final_val_loss"] and summary["tokens"] == 4 * 2 * 16


def test_each_rank_takes_its_own_micro_steps_of_the_global_batch(small_data, tmp_path, monkeypatch):
    """Under DDP an iteration's global batch is one draw of gradient_accumulation_steps x batch_size windows, the same
    on every rank; rank r of K runs micro-steps r*G/K .. (r+1)*G/K - 1 of it (so 1 or K processes see the same data),
    and returns the mean of its micro-steps' losses (DDP averages the gradients over the ranks)."""
    import copy

    import train
    from evaluate import Batches
    cfg, gptconf, _ = train.configure([*SMALL, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'o'}",
                                       "--gradient_accumulation_steps=4"])
    env = train.Env(ddp=False, rank=1, local_rank=1, world=2, device=torch.device("cpu"), dtype="float32",
                    autocast=train.nullcontext(), data_dir=str(small_data), out_dir=str(tmp_path / "o"))
    run = train.build(cfg, gptconf, None, env)
    drawn = Batches(str(small_data / "train.bin"), 16, 2, cfg["seed"]).draw(4)  # iteration 0's global batch
    before = copy.deepcopy(run.raw_model)
    seen, get = [], run.batches.get
    monkeypatch.setattr(run.batches, "get", lambda offsets, device: seen.append(offsets) or get(offsets, device))
    loss = train.train_step(run, train.PhaseTimer(env.device), timed=False, lr=1e-3)
    assert torch.equal(torch.stack(seen), drawn[2:4])
    with torch.no_grad():
        expected = sum(before(*get(offsets, env.device))[1] for offsets in drawn[2:4]) / 2
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_micro_steps_accumulate_to_the_step_of_their_whole_batch(small_data, tmp_path):
    """gradient_accumulation_steps=2 of batch_size 2 is one step over the 4 windows of batch_size 4 (one generator
    draws the same offsets): the same logged losses and weights, up to float32 summation order; the tokens count
    every micro-step."""
    runs = []
    for batch in (["--batch_size=4"], ["--batch_size=2", "--gradient_accumulation_steps=2"]):
        out = tmp_path / batch[-1][2:]
        train_in_process([f"--data_dir={small_data}", f"--out_dir={out}", "--max_iters=3", "--eval_interval=3", *batch])
        runs.append((train_losses(out), torch.load(out / "ckpt.pt", weights_only=False)["model"],
                     json.loads((out / "summary.json").read_text())["tokens"]))
    (losses, weights, tokens), (accum_losses, accum_weights, accum_tokens) = runs
    assert sorted(losses) == sorted(accum_losses) == [1, 2, 3]
    assert [accum_losses[i] for i in (1, 2, 3)] == pytest.approx([losses[i] for i in (1, 2, 3)], rel=1e-5)
    for k in weights:
        torch.testing.assert_close(accum_weights[k], weights[k], rtol=1e-4, atol=1e-6)
    assert tokens == accum_tokens == 3 * 4 * 16


@pytest.mark.parametrize("always", [True, False])
def test_checkpoint_at_every_evaluation_or_at_each_new_best(always, small_data, tmp_path, monkeypatch):
    """always_save_checkpoint=True checkpoints at every evaluation (the last one's is on disk at the end); False only
    at those that improve the val loss (the best one's is), each with its own evaluation's val loss and the best so
    far. The evaluations' losses are scripted: best at 4."""
    import train
    val = iter([5.0, 4.5, 4.0, 4.2, 4.1])  # iterations 0, 2, 4, 6, 8
    monkeypatch.setattr(train, "evaluate", lambda run: dict(train=4.0, val=next(val)))
    out = tmp_path / "run"
    train_in_process([f"--data_dir={small_data}", f"--out_dir={out}", "--eval_interval=2", "--max_iters=8",
                      f"--always_save_checkpoint={always}"])
    assert json.loads((out / "summary.json").read_text())["best_iter"] == 4
    ckpt = torch.load(out / "ckpt.pt", weights_only=False)
    assert (ckpt["iter_num"], ckpt["val_loss"], ckpt["best_val_loss"]) == ((8, 4.1, 4.0) if always else (4, 4.0, 4.0))


def test_a_kept_log_record_ends_its_line(tmp_path):
    """trim_log keeps a last record whose newline a kill cut off as a whole line: the next record appended starts a
    line of its own (it was glued to it, and both were lost to readers)."""
    import train
    log = tmp_path / "log.jsonl"
    log.write_text('{"iter": 1, "loss": 2.0}\n{"iter": 2, "loss": 1.5}')
    train.trim_log(str(log), 5)
    with open(log, "a") as f:
        f.write(json.dumps({"iter": 3, "loss": 1.0}) + "\n")
    assert [r["iter"] for r in read_log(tmp_path)] == [1, 2, 3]


def test_log_lines_report_each_interval_per_iteration(small_data, tmp_path, monkeypatch):
    """On a clock where an iteration takes 1 s and an evaluation 100 s: every log line (log_interval 3) says 1000
    ms/iter and tokens_per_iter tokens/s (the interval over its iterations; evaluation time is no iteration's), and
    the MFU of this model at 1 s an iteration against peak_tflops, logged only once the interval lies past the
    untimed first iterations (null before)."""
    import train
    from model import GPT, GPTConfig
    clock = [0.0]
    monkeypatch.setattr(train, "time", SimpleNamespace(time=lambda: clock[0], sleep=time.sleep,
                                                       perf_counter=time.perf_counter))

    def advancing(real, seconds):
        def call(*args, **kwargs):
            result = real(*args, **kwargs)
            clock[0] += seconds
            return result
        return call

    monkeypatch.setattr(train, "train_step", advancing(train.train_step, 1.0))
    monkeypatch.setattr(train, "evaluate", advancing(train.evaluate, 100.0))
    out = tmp_path / "run"
    train_in_process([f"--data_dir={small_data}", f"--out_dir={out}", "--max_iters=12", "--eval_interval=6",
                      "--log_interval=3", "--save_checkpoint=False", "--peak_tflops=1e-3"])
    lines = [r for r in read_log(out) if "loss" in r]
    assert [r["iter"] for r in lines] == [3, 6, 9, 12]
    assert [r["ms_per_iter"] for r in lines] == [1000.0] * 4
    assert [r["tokens_per_s"] for r in lines] == [2 * 16] * 4  # batch 2 x block 16 a second
    config = json.loads((out / "summary.json").read_text())["model_config"]
    mfu = GPT(GPTConfig(**config)).estimate_mfu(2 * 16, 1.0, 1e9)
    assert [r["mfu"] for r in lines[:2]] == [None, None] and train.UNTIMED_ITERS == 5  # iterations 1-6 hold 1-5
    assert [r["mfu"] for r in lines[2:]] == pytest.approx([mfu, mfu])


def test_a_resume_of_a_never_evaluated_checkpoint_evaluates_first(small_run):
    """A checkpoint no evaluation ever saw (best_iter -1: a converted model about to be fine-tuned) is evaluated at
    its iteration when resumed (a resume of an evaluated one is not: it logged that evaluation already)."""
    from checkpoint import save_checkpoint
    args, out = small_run
    ckpt = torch.load(out / "ckpt.pt", weights_only=False)
    ckpt.update(best_iter=-1, best_val_loss=math.inf, val_loss=None, bad_evals=0)
    save_checkpoint(out / "ckpt.pt", ckpt)
    (out / "log.jsonl").unlink()
    train_in_process([*args, "--init_from=resume", "--max_iters=5"])
    assert [r["iter"] for r in read_log(out) if "val_loss" in r] == [4, 5]
    assert json.loads((out / "summary.json").read_text())["best_iter"] in (4, 5)


def test_a_resume_takes_every_run_key_from_its_checkpoint(small_run, capsys):
    """Each of train_config.RUN_KEYS that a resume does not give is its checkpoint's run's (here every one is set to
    a value other than its default), and the note names them."""
    import train
    from checkpoint import save_checkpoint
    from train_config import RUN_KEYS, TRAIN_DEFAULTS
    args, out = small_run
    data_dir = args[0].partition("=")[2]
    run = dict(eval_interval=3, log_interval=2, eval_iters=3, eval_full_val=True, always_save_checkpoint=False,
               save_checkpoint=False, patience=5, dataset="other", data_dir=data_dir, gradient_accumulation_steps=2,
               batch_size=3, learning_rate=2e-3, max_iters=9, weight_decay=0.2, beta1=0.8, beta2=0.9, grad_clip=0.5,
               decay_lr=False, warmup_iters=1, lr_decay_iters=9, min_lr=1e-4, seed=7)
    assert sorted(run) == sorted(RUN_KEYS) and all(run[k] != TRAIN_DEFAULTS[k] for k in run)
    ckpt = torch.load(out / "ckpt.pt", weights_only=False)
    ckpt["config"].update(run)
    save_checkpoint(out / "ckpt.pt", ckpt)
    capsys.readouterr()
    cfg, _, _ = train.configure([f"--out_dir={out}", "--init_from=resume", "--device=cpu"])
    assert {k: cfg[k] for k in RUN_KEYS} == run
    err = capsys.readouterr().err
    assert all(f"{k}={v!r}" in err for k, v in run.items()), err

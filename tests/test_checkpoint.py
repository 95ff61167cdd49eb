"""checkpoint.py: atomic writes (a failed or killed save leaves the old ckpt.pt intact), stale temp
files removed, one-line errors for missing/empty/truncated/foreign files, valid JSON without NaN."""
import json
import math
import os
import subprocess
import threading

import pytest
import torch

import checkpoint as ck
from tiny import make


def tiny_checkpoint(seed=0, **extra):
    model = make(dtype=torch.float32, seed=seed)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    return ck.make_checkpoint(model, opt, {"seed": 1}, iter_num=seed, **extra)


def test_layout_round_trip(tmp_path):
    path = tmp_path / "ckpt.pt"
    ck.save_checkpoint(path, tiny_checkpoint(seed=3, best_val_loss=2.5, best_iter=3))
    model, loaded = ck.load_checkpoint(str(tmp_path))  # a folder: its ckpt.pt
    assert set(ck.TRAINING_KEYS) <= set(loaded) and loaded["iter_num"] == 3 and loaded["best_val_loss"] == 2.5
    ref = make(dtype=torch.float32, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values()))
    assert not model.training and list(tmp_path.iterdir()) == [path]  # no temp file left


def test_failed_save_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    """A save that dies half way (disk full, kill) never touches the existing ckpt.pt."""
    path = tmp_path / "ckpt.pt"
    ck.save_checkpoint(path, tiny_checkpoint(seed=1))
    before = path.read_bytes()
    real_save = torch.save

    def half_then_fail(obj, f):  # writes a truncated file at the temp path, then fails
        real_save(obj, f)
        with open(f, "r+b") as fh:
            fh.truncate(os.path.getsize(f) // 2)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ck.torch, "save", half_then_fail)
    with pytest.raises(OSError, match="No space"):
        ck.save_checkpoint(path, tiny_checkpoint(seed=2))
    monkeypatch.undo()
    assert path.read_bytes() == before and list(tmp_path.iterdir()) == [path]  # temp file removed too
    assert ck.load_checkpoint(path)[1]["iter_num"] == 1


def test_writes_go_through_a_temp_file_and_rename(tmp_path, monkeypatch):
    """While the new checkpoint is being written, ckpt.pt is still the old complete one."""
    path = tmp_path / "ckpt.pt"
    ck.save_checkpoint(path, tiny_checkpoint(seed=1))
    seen = []
    real_save = torch.save

    def spy(obj, f):
        seen.append((str(f), ck.read_checkpoint(path)["iter_num"]))  # the old one reads fine mid-save
        real_save(obj, f)

    monkeypatch.setattr(ck.torch, "save", spy)
    ck.save_checkpoint(path, tiny_checkpoint(seed=2))
    assert seen == [(f"{path}.tmp.{threading.get_ident()}.{os.getpid()}", 1)] and ck.read_checkpoint(path)["iter_num"] == 2


def test_threads_of_one_process_write_one_file_apart(tmp_path):
    """Temp files are per writer (thread and process): two threads writing the same file never take each other's
    temp file away; the file ends whole, as one of them wrote it."""
    path = tmp_path / "summary.json"
    errors = []

    def writer(k):
        try:
            for i in range(100):
                ck.write_json(path, {"writer": k, "i": i})
        except Exception as e:  # noqa: BLE001  any failure of a write is the bug
            errors.append(e)
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and json.loads(path.read_text())["i"] == 99
    assert not list(tmp_path.glob("*.tmp*"))


def test_weights_that_do_not_fit_name_what(tmp_path):
    """A checkpoint whose weights do not fit its model_config: the error names the keys, not only torch's header."""
    state = tiny_checkpoint()
    state["model"] = {k: v for k, v in state["model"].items() if not k.endswith("c_fc.weight")}
    path = tmp_path / "ckpt.pt"
    ck.save_checkpoint(path, state)
    with pytest.raises(ValueError, match=r"do not match its model_config: Missing key\(s\) in state_dict: .*c_fc"):
        ck.load_checkpoint(str(path))


def test_stale_temp_files_of_dead_processes_are_removed(tmp_path):
    path = tmp_path / "ckpt.pt"
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale, live, other = (tmp_path / f"ckpt.pt.tmp.{dead.pid}", tmp_path / f"ckpt.pt.tmp.{os.getppid()}",
                          tmp_path / "ckpt.pt.tmp.notapid")
    for p in (stale, live, other):
        p.write_bytes(b"partial")
    ck.save_checkpoint(path, tiny_checkpoint())
    assert not stale.exists() and live.exists() and other.exists()  # a live writer's file is left alone


@pytest.mark.parametrize("kind", ["missing", "empty", "truncated", "text", "list", "number", "no_model",
                                  "bad_config", "unknown_key"])
def test_unreadable_checkpoints_are_one_line_errors(kind, tmp_path):
    path = tmp_path / "ckpt.pt"
    if kind != "missing":
        ck.save_checkpoint(path, tiny_checkpoint())
    good = path.read_bytes() if path.exists() else b""
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif kind == "text":
        path.write_text("this is not a checkpoint\n")
    elif kind == "list":
        torch.save([1, 2, 3], path)
    elif kind == "number":  # not a container: `key in checkpoint` would be a TypeError
        torch.save(3, path)
    elif kind == "no_model":
        torch.save({"model_config": {}}, path)
    elif kind == "bad_config":
        c = tiny_checkpoint()
        c["model_config"]["n_head"] = 5  # 32 is not a multiple of 5
        torch.save(c, path)
    elif kind == "unknown_key":  # a key this model.py lacks (another version's): it was dropped, the model rebuilt
        c = tiny_checkpoint()     # without it
        c["model_config"]["qk_norm"] = True
        torch.save(c, path)
    error = FileNotFoundError if kind == "missing" else ValueError
    with pytest.raises(error) as e:
        ck.load_checkpoint(str(path))
    message = str(e.value)
    assert str(path) in message and "\n" not in message, message
    if kind == "unknown_key":
        assert "model_config has keys this model.py does not know: qk_norm" in message, message
    if kind == "empty":  # says why, not only torch's complaint about a zip archive
        assert "is empty" in message, message


def test_a_run_trained_without_checkpoints_says_so(tmp_path):
    """A sweep's run (save_checkpoint=False) has a folder but no ckpt.pt: reading it says why, not only 'no
    checkpoint' (sample.py added 'train one first' to a run that had been trained)."""
    (tmp_path / "config.json").write_text(json.dumps({"out_dir": str(tmp_path), "save_checkpoint": False}))
    with pytest.raises(FileNotFoundError, match="trained with save_checkpoint=False and wrote none"):
        ck.read_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"out_dir": str(tmp_path), "save_checkpoint": True}))
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at .*ckpt\.pt$"):  # killed before its first save
        ck.read_checkpoint(tmp_path)


def test_write_json_is_valid_json_without_nan(tmp_path):
    path = tmp_path / "summary.json"
    ck.write_json(path, {"final_val_loss": math.nan, "best": math.inf, "nested": [1.5, -math.inf], "ok": 2.0})

    def refuse(name):
        raise AssertionError(f"{name} is not JSON")
    data = json.loads(path.read_text(), parse_constant=refuse)  # strict: no NaN / Infinity
    assert data == {"final_val_loss": None, "best": None, "nested": [1.5, None], "ok": 2.0}


def test_the_dropout_generator_of_the_device_is_saved(monkeypatch):
    """rng_state keeps the CPU's generator and the one that draws dropout masks on the run's GPU: CUDA's, or an
    Apple GPU's (torch.mps, restored by train.py on resume; a stand-in here, no MPS machine)."""
    state = torch.arange(8, dtype=torch.uint8)
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda: state)
    on_mps = ck.rng_state("mps")
    assert on_mps["mps"] is state and on_mps["cuda"] is None and torch.equal(on_mps["torch"], torch.get_rng_state())
    on_cpu = ck.rng_state("cpu")
    assert on_cpu["mps"] is None and on_cpu["cuda"] is None


def test_saved_rng_state_per_rank():
    states = [{"torch": torch.tensor([r], dtype=torch.uint8), "cuda": None} for r in range(2)]
    assert ck.saved_rng_state({"rng_states": states}, 1) is states[1]
    assert ck.saved_rng_state({"rng_states": states}, 2) is None  # resumed on more ranks: reseeded
    old = {"torch_rng_state": states[0]["torch"], "cuda_rng_state": None}  # the earlier layout (rank 0 only)
    assert torch.equal(ck.saved_rng_state(old, 0)["torch"], states[0]["torch"]) and ck.saved_rng_state(old, 1) is None


def test_read_log_and_read_json_tolerate_cut_files(tmp_path):
    """What a killed run leaves: log.jsonl's last line cut, a summary.json half written or missing."""
    from checkpoint import read_json, read_log
    (tmp_path / "log.jsonl").write_text('{"iter": 1, "loss": 2.5}\n{"iter": 2, "loss": 2.4}\n{"iter": 3, "lo')
    assert read_log(tmp_path) == [{"iter": 1, "loss": 2.5}, {"iter": 2, "loss": 2.4}]
    assert read_log(tmp_path / "missing") == []
    (tmp_path / "summary.json").write_text('{"finished": tr')
    assert read_json(tmp_path / "summary.json") is None and read_json(tmp_path / "none.json") is None
    (tmp_path / "summary.json").write_text('{"finished": true}')
    assert read_json(tmp_path / "summary.json") == {"finished": True}


def test_pid_alive_counts_an_exited_unreaped_process_as_gone():
    import sys
    import time
    from checkpoint import pid_alive
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    for _ in range(200):  # exited but not waited for: a zombie
        if not pid_alive(child.pid):
            break
        time.sleep(0.05)
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid)


def test_make_checkpoint_saves_every_field_it_is_given(tmp_path):
    """Each piece of run state given to make_checkpoint comes back from the file as given: early stopping's count, the
    best iteration, the sampler and RNG states, a converter's extra notes, and the gathered model and optimizer states
    an FSDP or master-weights run passes instead of the module's own."""
    model = make(dtype=torch.float32, seed=0)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    gathered = make(dtype=torch.float32, seed=1).state_dict()  # other weights than the module's own
    opt_state = {"state": {}, "param_groups": [{"lr": 0.25, "params": []}]}
    given = dict(iter_num=7, best_val_loss=2.25, best_iter=5, bad_evals=2, val_loss=2.5, sampler_state=torch.arange(3),
                 rng_states=[{"torch": torch.get_rng_state(), "cuda": None, "mps": None}], note="converted")
    path = tmp_path / "ckpt.pt"
    ck.save_checkpoint(path, ck.make_checkpoint(model, opt, {"seed": 1}, model_state=gathered,
                                                optimizer_state=opt_state, **given))
    loaded = ck.read_checkpoint(path, ck.TRAINING_KEYS)
    for key in ("iter_num", "best_val_loss", "best_iter", "bad_evals", "val_loss", "note"):
        assert loaded[key] == given[key], key
    assert torch.equal(loaded["sampler_state"], given["sampler_state"])
    assert torch.equal(loaded["rng_states"][0]["torch"], given["rng_states"][0]["torch"])
    assert loaded["optimizer"] == opt_state
    assert all(torch.equal(loaded["model"][k], v) for k, v in gathered.items())


def test_a_checkpoint_made_before_any_evaluation_says_so():
    """What make_checkpoint is not given is the layout's 'never evaluated' (a converted model): no best val loss
    (inf) at iteration -1, no val loss, no evaluation without improvement; not an evaluation at iteration 0."""
    ckpt = tiny_checkpoint()
    assert (ckpt["best_val_loss"], ckpt["best_iter"], ckpt["val_loss"], ckpt["bad_evals"]) == (math.inf, -1, None, 0)


def test_a_cuda_runs_rng_state_holds_the_cuda_generator_and_no_apple_gpus(monkeypatch):
    """On a CUDA device the saved states are the CPU's and that device's; torch.mps is never asked (stand-ins here:
    no GPU)."""
    cuda_state = torch.arange(4, dtype=torch.uint8)
    asked = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": asked.append(device) or cuda_state)

    def no_mps():
        raise AssertionError("torch.mps asked on a CUDA run")
    monkeypatch.setattr(torch.mps, "get_rng_state", no_mps)
    on_cuda = ck.rng_state("cuda:1")
    assert on_cuda["cuda"] is cuda_state and on_cuda["mps"] is None and asked == ["cuda:1"]


def test_read_log_skips_a_cut_line_and_keeps_the_records_after_it(tmp_path):
    """A damaged line is left out wherever it is (a kill's cut line, then records appended after it): the records
    that follow it are read too."""
    from checkpoint import read_log
    (tmp_path / "log.jsonl").write_text('{"iter": 1, "loss": 2.5}\n{"iter": 2, "lo\n{"iter": 2, "loss": 2.4}\n')
    assert read_log(tmp_path) == [{"iter": 1, "loss": 2.5}, {"iter": 2, "loss": 2.4}]


def test_log_losses_keeps_training_and_evaluation_records_apart(tmp_path):
    """log_losses: training losses from the records with a loss, val losses from the evaluation records only (an
    evaluation's record holds no training loss, a training record no val loss)."""
    from checkpoint import log_losses
    records = [{"iter": 1, "loss": 3.0}, {"iter": 2, "loss": 2.5}, {"iter": 2, "val_loss": 2.75, "train_loss": 2.6},
               {"iter": 3, "loss": 2.25}]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert log_losses(tmp_path) == ({1: 3.0, 2: 2.5, 3: 2.25}, {2: 2.75})


def test_git_commit_is_head_and_dirty_only_for_changed_tracked_files(tmp_path, monkeypatch):
    """git_commit names HEAD of the repository holding checkpoint.py, with '-dirty' once a tracked file differs from
    it; an untracked file (a run's output) leaves it clean; outside any repository it is 'unknown'. (A repository made
    here, checkpoint.py's location pointed into it.)"""
    import shutil
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above tmp_path is found
    repo, plain = tmp_path / "repo", tmp_path / "plain"
    repo.mkdir()
    plain.mkdir()

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                              capture_output=True, text=True).stdout.strip()
    git("init", "-q")
    (repo / "checkpoint.py").write_text("x = 1\n")
    git("add", "checkpoint.py")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD")
    monkeypatch.setattr(ck, "__file__", str(repo / "checkpoint.py"))
    assert ck.git_commit() == head
    (repo / "out.json").write_text("{}")  # untracked
    assert ck.git_commit() == head
    (repo / "checkpoint.py").write_text("x = 2\n")
    assert ck.git_commit() == f"{head}-dirty"
    monkeypatch.setattr(ck, "__file__", str(plain / "checkpoint.py"))
    assert ck.git_commit() == "unknown"


def test_a_checkpoint_whose_pickle_would_run_code_is_refused_unrun(tmp_path):
    """Checkpoints are read with weights_only: one holding an object whose unpickling calls a function (here it would
    make a folder) is a one-line ValueError naming the file, and the function never runs."""
    marker = tmp_path / "ran"

    class RunsCode:
        def __reduce__(self):
            return os.mkdir, (str(marker),)
    path = tmp_path / "ckpt.pt"
    torch.save(tiny_checkpoint(payload=RunsCode()), path)
    with pytest.raises(ValueError) as e:
        ck.read_checkpoint(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    assert not marker.exists()


def test_a_compiled_models_weights_load_into_the_plain_model(tmp_path):
    """A state_dict saved from a torch.compile'd model has every key prefixed '_orig_mod.': load_checkpoint rebuilds
    the plain model with those weights."""
    c = tiny_checkpoint(seed=4)
    c["model"] = {f"_orig_mod.{k}": v for k, v in c["model"].items()}
    ck.save_checkpoint(tmp_path / "ckpt.pt", c)
    model, _ = ck.load_checkpoint(tmp_path)
    ref = make(dtype=torch.float32, seed=4)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values()))


def test_the_model_comes_back_in_the_dtype_it_was_saved_in(tmp_path):
    """bfloat16 weights load into a bfloat16 model, bit for bit (not upcast into a float32 one)."""
    c = tiny_checkpoint(seed=5)
    c["model"] = {k: v.to(torch.bfloat16) for k, v in c["model"].items()}
    ck.save_checkpoint(tmp_path / "ckpt.pt", c)
    model, _ = ck.load_checkpoint(tmp_path / "ckpt.pt")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert all(torch.equal(model.state_dict()[k], v) for k, v in c["model"].items())


def test_load_model_takes_a_checkpoint_file_or_its_folder(tmp_path):
    """load_model(out_dir) reads out_dir/ckpt.pt; given the checkpoint file itself (any name), it reads that."""
    path = tmp_path / "best.pt"
    ck.save_checkpoint(path, tiny_checkpoint(seed=6))
    ck.save_checkpoint(tmp_path / "ckpt.pt", tiny_checkpoint(seed=7))
    ref6, ref7 = make(dtype=torch.float32, seed=6), make(dtype=torch.float32, seed=7)
    for where, ref in ((path, ref6), (str(path), ref6), (tmp_path, ref7)):
        model = ck.load_model(where)
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values())), where


def test_stale_temp_files_are_found_beside_a_path_with_glob_characters(tmp_path):
    """A run folder named with glob's special characters ('run[1]', '*'): the stale temp files beside its files are
    still found and removed (the path is matched literally)."""
    folder = tmp_path / "run[1]*"
    folder.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = folder / f"summary.json.tmp.{dead.pid}"
    stale.write_bytes(b"partial")
    ck.write_json(folder / "summary.json", {"ok": 1})
    assert not stale.exists() and json.loads((folder / "summary.json").read_text()) == {"ok": 1}


def test_a_process_of_another_user_counts_as_alive(monkeypatch):
    """Signal 0 to another user's process fails with PermissionError: the process exists, so pid_alive says so (its
    writer's temp files are not taken from under it)."""
    import atomic_files

    def not_ours(pid, sig):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(atomic_files.os, "kill", not_ours)
    assert atomic_files.pid_alive(os.getpid())


def test_a_live_process_whose_state_cannot_be_read_counts_as_alive(tmp_path, monkeypatch):
    """Where /proc/<pid>/stat cannot be read (no /proc: macOS; or a process hidden from this one) a process that
    answers signal 0 exists: pid_alive says so, and its writer's temp file is not removed as stale."""
    import atomic_files

    def no_proc(path, *args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", path)
    monkeypatch.setattr(atomic_files, "open", no_proc, raising=False)
    assert atomic_files.pid_alive(os.getpid())
    live = tmp_path / f"ckpt.pt.tmp.{os.getppid()}"
    live.write_bytes(b"partial")
    assert atomic_files.remove_stale_temps(tmp_path / "ckpt.pt") == [] and live.exists()


def test_a_prepares_start_removes_what_a_killed_prepare_left_beside_each_output(tmp_path):
    """remove_stale_outputs (a prepare's first step) removes the temp files of dead writers beside each of a prepare's
    outputs, train.bin, val.bin and meta.json, and leaves a live writer's and other files alone."""
    from atomic_files import remove_stale_outputs
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [tmp_path / f"{name}.tmp.{dead.pid}" for name in ("train.bin", "val.bin", "meta.json")]
    kept = [tmp_path / f"val.bin.tmp.{os.getppid()}", tmp_path / f"input.txt.tmp.{dead.pid}"]
    for p in stale + kept:
        p.write_bytes(b"partial")
    assert sorted(remove_stale_outputs(tmp_path)) == sorted(map(str, stale))
    assert sorted(tmp_path.iterdir()) == sorted(kept)


def test_a_write_is_on_disk_before_its_rename_and_the_rename_after_it(tmp_path, monkeypatch):
    """atomic_write fsyncs the new file's data before the rename makes it `path` (after a crash the name never points
    at unwritten data), and fsyncs the folder after the rename (the rename itself survives a crash)."""
    import stat

    import atomic_files
    events, real_fsync, real_replace = [], os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        events.append(("fsync dir" if stat.S_ISDIR(st.st_mode) else "fsync file", st.st_ino))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", None))
        real_replace(src, dst)
    monkeypatch.setattr(atomic_files.os, "fsync", fsync)
    monkeypatch.setattr(atomic_files.os, "replace", replace)
    path = tmp_path / "summary.json"
    ck.write_json(path, {"ok": 1})
    monkeypatch.undo()
    renamed = events.index(("replace", None))
    assert ("fsync file", path.stat().st_ino) in events[:renamed], events
    assert ("fsync dir", tmp_path.stat().st_ino) in events[renamed:], events


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
@pytest.mark.parametrize("temp_made", [True, False])
def test_a_failed_or_interrupted_write_raises_its_own_error_and_leaves_nothing(exc, temp_made, tmp_path):
    """A write that fails or is interrupted (Ctrl-C, or SIGTERM under interrupt_on_sigterm), before or after it made
    its temp file: that exception propagates, `path` is as it was and no temp file is left."""
    import atomic_files
    path = tmp_path / "table.md"
    path.write_text("old")

    def write(tmp):
        if temp_made:
            with open(tmp, "w") as f:
                f.write("half")
        raise exc("stopped")
    with pytest.raises(exc, match="stopped"):
        atomic_files.atomic_write(path, write)
    assert path.read_text() == "old" and list(tmp_path.iterdir()) == [path]


def test_write_json_makes_non_finite_numbers_in_tuples_null(tmp_path):
    """Tuples (a shape, a (mean, std) pair) are sanitised as lists are: strict JSON, non-finite numbers null."""
    path = tmp_path / "summary.json"
    ck.write_json(path, {"pair": (math.nan, 1.5), "nested": [(math.inf, 2.0)]})

    def refuse(name):
        raise AssertionError(f"{name} is not JSON")
    assert json.loads(path.read_text(), parse_constant=refuse) == {"pair": [None, 1.5], "nested": [[None, 2.0]]}


def _sigterm_at_its_default(_) -> bool:  # run in a pool's worker, which has run no initializer
    import signal
    return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_worker_pools_fork_their_workers_with_sigterm_at_its_default():
    """worker_pool's workers, forked inside interrupt_on_sigterm (as the prepares fork theirs), hold SIGTERM's
    default before any initializer runs, so a pool.terminate() is never lost in a worker that still has the parent's
    handler (that hung an enwiki pack); the parent's own handler is back as soon as the pool is made."""
    import signal

    from atomic_files import interrupt_on_sigterm, worker_pool
    with interrupt_on_sigterm():
        inside = signal.getsignal(signal.SIGTERM)
        pool = worker_pool(2)
        try:
            assert signal.getsignal(signal.SIGTERM) is inside
            assert pool.map(_sigterm_at_its_default, range(4), chunksize=1) == [True] * 4
        finally:
            pool.terminate()
            pool.join()


def test_interrupt_on_sigterm_raises_keyboardinterrupt_inside_and_restores_the_handler():
    """Inside the block SIGTERM raises KeyboardInterrupt (the clean-up of a Ctrl-C runs); after it, also when it ended
    by that exception, SIGTERM's previous handler is back."""
    import signal

    from atomic_files import interrupt_on_sigterm
    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(KeyboardInterrupt):
            with interrupt_on_sigterm():
                signal.raise_signal(signal.SIGTERM)
        after = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert after is before


def test_a_worker_pool_made_outside_the_main_thread_works():
    """Only the main thread can set signal handlers: worker_pool made in another thread is a plain pool (not
    signal's ValueError), its workers working."""
    from atomic_files import worker_pool
    got = []

    def make():
        pool = worker_pool(1)
        try:
            got.append(pool.apply(abs, (-3,)))
        finally:
            pool.terminate()
            pool.join()
    t = threading.Thread(target=make)
    t.start()
    t.join(60)
    assert got == [3]


def test_terminate_pool_waits_a_bounded_time_in_a_daemon_thread():
    """terminate_pool returns True once the pool's terminate has finished, and False after `timeout` s when it hangs
    (CPython's can), leaving it in a daemon thread that cannot hold the interpreter's exit."""
    import time

    from atomic_files import terminate_pool
    release, calls = threading.Event(), []

    class Hangs:
        def terminate(self):
            calls.append(threading.current_thread())
            release.wait(5)

    class Ends:
        def terminate(self):
            calls.append(threading.current_thread())

    assert terminate_pool(Ends(), timeout=5) is True
    t0 = time.time()
    try:
        assert terminate_pool(Hangs(), timeout=0.2) is False and time.time() - t0 < 2
        assert calls[1].is_alive() and calls[1].daemon
    finally:
        release.set()

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


@pytest.mark.parametrize("kind", ["missing", "empty", "truncated", "text", "list", "no_model", "bad_config",
                                  "unknown_key"])
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

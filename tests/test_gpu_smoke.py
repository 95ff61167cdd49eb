"""scripts/gpu_smoke.sh (the CUDA-only user paths, run on a lent GPU) stays runnable where CI can look: bash parses
it, and every key it gives train.py or sample.py is one of theirs (a renamed key would fail only on the GPU)."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "scripts" / "gpu_smoke.sh"


def test_bash_parses_it():
    run = subprocess.run(["bash", "-n", str(SMOKE)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def keys_given(text: str) -> tuple:
    """(train.py's keys, sample.py's keys) as the script gives them: T's definition and the lines that run train.py
    or $TR; S's definition and the lines that run $S."""
    train_keys, sample_keys = set(), set()
    t_def = re.search(r'^T="(.*?)"', text, flags=re.S | re.M).group(1)
    train_keys |= set(re.findall(r"--(\w+)=", t_def))
    for line in text.splitlines():
        if line.startswith("S="):
            sample_keys |= set(re.findall(r"--(\w+)=", line))
        elif line.startswith("r ") and "$S" in line:
            sample_keys |= set(re.findall(r"--(\w+)=", line))
        elif line.startswith("r ") and ("train.py" in line or "$TR" in line):
            train_keys |= set(re.findall(r"--(\w+)=", line))
    return train_keys, sample_keys


def test_every_key_is_a_train_or_sample_key():
    import sample
    import train

    train_keys, sample_keys = keys_given(SMOKE.read_text())
    assert {"data_dir", "attn", "tucker_ranks", "fsdp", "compile", "graph_step", "dtype", "init_from"} <= train_keys
    assert {"out_dir", "decode", "temperature", "compile", "batch_size", "max_new_tokens"} <= sample_keys
    assert train_keys - set(train.DEFAULTS) == set()
    assert sample_keys - set(sample.DEFAULTS) == set()


def test_on_a_machine_without_a_gpu_both_scripts_refuse_in_one_line(tmp_path):
    """gpu_smoke.sh and gpu_session.sh on a CPU machine: one `error:` line and exit 2, nothing made under OUT or
    WORK (gpu_smoke ran its 16 steps to 16 failures; gpu_session printed nvidia-smi's "command not found" and
    exited 0); --help prints the header."""
    import shutil
    import sys

    import pytest
    import torch
    if torch.cuda.is_available() or shutil.which("nvidia-smi"):
        pytest.skip("a GPU machine: the scripts would run")
    env = {"PATH": "/usr/bin:/bin", "PY": sys.executable, "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "w")}
    for script in ("gpu_smoke.sh", "gpu_session.sh"):
        run = subprocess.run(["bash", str(ROOT / "scripts" / script), "tests"], capture_output=True, text=True, env=env,
                             timeout=60)
        assert run.returncode == 2 and run.stderr.startswith("error: no ") and run.stderr.count("\n") == 1, run
        assert not list(tmp_path.iterdir()), script
        usage = subprocess.run(["bash", str(ROOT / "scripts" / script), "--help"], capture_output=True, text=True,
                               env=env, timeout=60)
        assert usage.returncode == 0 and "OUT=" in usage.stdout and "#" not in usage.stdout[:5], usage


def test_gpu_session_knows_each_stage_of_its_loop_and_refuses_any_other_before_running(tmp_path):
    """gpu_session.sh's STAGES list is its loop's case labels (a stage added to the loop but not the list would be
    refused; one in the list but not the loop would do nothing), and a misspelt stage, an empty enwiki budget or no
    stage at all is refused with one `error:` line and exit 2 before any stage runs or anything is made (an unknown
    stage used to print a line among the others' logs and exit 0 at the end)."""
    import re
    import shutil
    import sys
    text = (ROOT / "scripts" / "gpu_session.sh").read_text()
    listed = re.search(r'^STAGES="([^"]*)"', text, re.M).group(1).split()
    loop = text[text.rindex('for st in "$@"; do\n    case $st in'):]  # the stages' loop, after the check's
    labels = re.findall(r"^    ([A-Za-z0-9_=*|]+)\)", loop, re.M)
    expanded = []
    for label in labels:
        if label == "decode_vs_base*":  # its own case below names the three
            expanded += re.findall(r"^        (decode_vs_base\w*)\)", loop, re.M)
        else:
            expanded.append(label.replace("=*", "="))
    assert sorted(expanded) == sorted(re.sub(r"=.*", "=", s) for s in listed)
    assert len(listed) == len(set(listed)) == 60
    env = {"PATH": "/usr/bin:/bin", "PY": sys.executable, "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "w")}
    cases = [(["tests", "decod"], "error: unknown stage 'decod' (nothing run); the stages: tests "),
             (["enwiki="], "error: unknown stage 'enwiki='"), ([], "error: no stage given")]
    if shutil.which("nvidia-smi") is None:  # on a GPU machine an accepted stage would start running
        cases.append((["enwiki_convert=DEADLINE2x", "tests"], None))
    for args, said in cases:
        run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_session.sh"), *args], capture_output=True,
                             text=True, env=env, timeout=60)
        if said is None:  # a stage with a value passes the check (then the GPU check refuses: no GPU here)
            assert "unknown stage" not in run.stderr and run.stderr.startswith("error: no NVIDIA GPU"), run
            continue
        assert run.returncode == 2 and run.stderr.startswith(said) and run.stderr.count("\n") == 1, run
        assert not list(tmp_path.iterdir()), args

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

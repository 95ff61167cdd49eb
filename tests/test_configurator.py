"""configurator.parse_config: config files and --key=value overrides, type-checked."""
import math

import pytest

from configurator import format_config, help_requested, parse_config

DEFAULTS = {
    "batch_size": 12,
    "learning_rate": 6e-4,
    "compile": True,
    "out_dir": "out",
    "tucker_ranks": (4, 32, 32),
    "n_kv_head": None,
}


def write(tmp_path, text, name="exp.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_untouched():
    cfg = parse_config([], DEFAULTS)
    assert cfg == DEFAULTS and cfg is not DEFAULTS


def test_file_then_cli_order(tmp_path):
    path = write(tmp_path, "import math\nfrom math import sqrt\n_helper = 3\nbatch_size = 32\nout_dir = 'out-file'\n"
                           "learning_rate = 1e-3 * sqrt(4)\n")
    cfg = parse_config([path, "--batch_size=64"], DEFAULTS)
    assert cfg["batch_size"] == 64 and cfg["out_dir"] == "out-file" and cfg["learning_rate"] == 2e-3
    # a later file wins over an earlier override: strictly in order
    assert parse_config(["--batch_size=64", path], DEFAULTS)["batch_size"] == 32
    assert DEFAULTS["batch_size"] == 12  # defaults are never mutated


def test_cli_types():
    cfg = parse_config(["--compile=False", "--learning_rate=1", "--out_dir=out-x", "--tucker_ranks=8,64,64",
                        "--n_kv_head=4"], DEFAULTS)
    assert cfg["compile"] is False
    assert cfg["learning_rate"] == 1.0 and isinstance(cfg["learning_rate"], float)
    assert cfg["out_dir"] == "out-x"
    assert cfg["tucker_ranks"] == (8, 64, 64)
    assert cfg["n_kv_head"] == 4
    assert parse_config(["--compile=true"], DEFAULTS)["compile"] is True
    assert parse_config(["--tucker_ranks=(2,16,16)"], DEFAULTS)["tucker_ranks"] == (2, 16, 16)
    assert parse_config(["--out_dir=2024"], DEFAULTS)["out_dir"] == "2024"  # str keys take the raw text
    assert parse_config(["--n_kv_head=None"], DEFAULTS)["n_kv_head"] is None
    # each override is checked against the default's type, not an earlier override's value
    assert parse_config(["--n_kv_head=4", "--n_kv_head=None"], DEFAULTS)["n_kv_head"] is None


def test_unknown_key_cli():
    with pytest.raises(ValueError, match="unknown config key 'batchsize'.*batch_size"):
        parse_config(["--batchsize=3"], DEFAULTS)


def test_unknown_key_names_the_close_keys_and_lists_the_valid_ones():
    """An unknown key's error suggests every close key (a typo between two) and lists all valid keys, sorted."""
    defaults = {"beta1": 0.9, "beta2": 0.95, "batch_size": 12}
    with pytest.raises(ValueError, match=r"did you mean '(beta2', 'beta1|beta1', 'beta2)'\?"):
        parse_config(["--beta=0.9"], defaults)
    with pytest.raises(ValueError, match=r"unknown config key 'zzz' in override '--zzz=1'; "
                                         r"valid keys: batch_size, beta1, beta2$"):
        parse_config(["--zzz=1"], defaults)


def test_unknown_key_in_file(tmp_path):
    path = write(tmp_path, "batch_size = 8\nlearning_rat = 1e-3\n")
    with pytest.raises(ValueError, match=r"unknown config key 'learning_rat' in .*exp\.py.*learning_rate"):
        parse_config([path], DEFAULTS)


@pytest.mark.parametrize("arg", ["--batch_size=1.5", "--batch_size=True", "--compile=1", "--compile=yes",
                                 "--learning_rate=abc", "--learning_rate=True", "--tucker_ranks=8",
                                 "--tucker_ranks=8,x,64", "--tucker_ranks=True,False"])
def test_wrong_type_cli(arg):
    key = arg[2:].split("=")[0]
    with pytest.raises(ValueError, match=f"config key '{key}'.*expected"):
        parse_config([arg], DEFAULTS)


def test_an_int_too_large_for_a_float_key_is_a_value_error(tmp_path):
    """An int beyond the largest float (a 400-digit override, or one in a file) for a float key is a ValueError naming
    the key, as any wrong value is (train.py's one-line error), not float()'s OverflowError traceback."""
    big = "1" + "0" * 400
    with pytest.raises(ValueError, match="config key 'learning_rate'.*beyond the largest float"):
        parse_config([f"--learning_rate={big}"], DEFAULTS)
    with pytest.raises(ValueError, match="config key 'learning_rate'.*beyond the largest float"):
        parse_config([write(tmp_path, f"learning_rate = {big}\n")], DEFAULTS)
    assert parse_config(["--learning_rate=1e999"], DEFAULTS)["learning_rate"] == math.inf  # a float: the key's range


@pytest.mark.parametrize("line,key,expected", [("compile = 0", "compile", "bool"), ("out_dir = 3", "out_dir", "str"),
                                               ("batch_size = 8.0", "batch_size", "int")])
def test_wrong_type_in_file(tmp_path, line, key, expected):
    path = write(tmp_path, line + "\n")
    with pytest.raises(ValueError, match=f"config key '{key}'.*expected {expected}"):
        parse_config([path], DEFAULTS)


def test_list_empty_tuple_and_other_defaults_keep_their_type():
    """A list default gives a list, an empty tuple default takes any entries, and a default of another type (a dict)
    takes only a value of that type, else a ValueError naming the key."""
    defaults = {"betas": [0.9, 0.95], "tags": (), "extra": {}}
    assert parse_config(["--betas=0.8,0.9"], defaults)["betas"] == [0.8, 0.9]
    assert isinstance(parse_config(["--betas=(0.8,0.9)"], defaults)["betas"], list)
    assert parse_config(["--tags=a,b"], defaults)["tags"] == ("a", "b")
    assert parse_config(["--extra={'k': 1}"], defaults)["extra"] == {"k": 1}
    with pytest.raises(ValueError, match="config key 'extra'.*expected dict"):
        parse_config(["--extra=abc"], defaults)


def test_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="config file not found"):
        parse_config([str(tmp_path / "missing.py")], DEFAULTS)
    (tmp_path / "folder.py").mkdir()  # a folder is not a config file, whatever its name
    for folder in (tmp_path, tmp_path / "folder.py"):
        with pytest.raises(FileNotFoundError, match=f"config file not found: '{folder}'"):
            parse_config([str(folder)], DEFAULTS)
    for arg in ("--compile", "--=3"):
        with pytest.raises(ValueError, match=f"bad override '{arg}': write overrides as --key=value"):
            parse_config([arg], DEFAULTS)


def test_format_config():
    text = format_config({"a": 1, "long_key": "x"})
    assert text.splitlines() == ["a        = 1", "long_key = 'x'"]


def test_include_runs_base_then_overrides(tmp_path):
    from configurator import parse_config
    (tmp_path / "base.py").write_text("batch_size = 64\nlearning_rate = 1e-4\n")
    (tmp_path / "variant.py").write_text('include("base.py")\nbatch_size = 8\n')
    cfg = parse_config([str(tmp_path / "variant.py")], {"batch_size": 1, "learning_rate": 0.1})
    assert cfg == {"batch_size": 8, "learning_rate": 1e-4}
    (tmp_path / "bad.py").write_text('include("base.py")\nnot_a_key = 3\n')
    with pytest.raises(ValueError, match="not_a_key"):
        parse_config([str(tmp_path / "bad.py")], {"batch_size": 1, "learning_rate": 0.1})


def test_includes_after_a_nested_one_are_relative_to_their_own_file(tmp_path):
    """An included file that includes from its own folder must not move the including file's next include there
    (the shared namespace's `include` is the including file's again once the included one has run)."""
    from configurator import parse_config
    (tmp_path / "bases").mkdir()
    (tmp_path / "bases" / "model.py").write_text('include("width.py")\n')
    (tmp_path / "bases" / "width.py").write_text("learning_rate = 1e-4\n")
    (tmp_path / "common.py").write_text("batch_size = 8\n")
    (tmp_path / "run.py").write_text('include("bases/model.py")\ninclude("common.py")\ninclude("bases/width.py")\n')
    cfg = parse_config([str(tmp_path / "run.py")], {"batch_size": 1, "learning_rate": 0.1})
    assert cfg == {"batch_size": 8, "learning_rate": 1e-4}


def test_include_cycle_and_a_file_that_is_not_python_are_named(tmp_path):
    """A file that includes itself (through another) is a ValueError naming the cycle, not a RecursionError; a config
    file must be a .py file; a file's helper classes (as its imports and functions) are not config keys."""
    (tmp_path / "a.py").write_text('include("b.py")\n')
    (tmp_path / "b.py").write_text('include("a.py")\n')
    with pytest.raises(ValueError, match=r"config include cycle: .*a\.py -> .*b\.py -> .*a\.py$"):
        parse_config([str(tmp_path / "a.py")], DEFAULTS)
    with pytest.raises(ValueError, match=r"must be a \.py file"):
        parse_config([write(tmp_path, "batch_size = 8\n", name="exp.txt")], DEFAULTS)
    path = write(tmp_path, "class Schedule:\n    warmup = 2\nbatch_size = 8 * Schedule.warmup\n")
    assert parse_config([path], DEFAULTS)["batch_size"] == 16


@pytest.mark.parametrize("text,line,kind", [
    ("batch_size = 8\nlearning_rate = (1e-3\n", 2, "SyntaxError"),
    ("batch_size = 8\n  learning_rate = 1e-3\n", 2, "IndentationError"),
    ("batch_size = 8\n\nlearning_rate = 1 / 0\n", 3, "ZeroDivisionError"),
    ("def lr():\n    return undefined_name\nlearning_rate = lr()\n", 2, "NameError"),
])
def test_config_file_that_does_not_run_is_one_line(tmp_path, text, line, kind):
    path = write(tmp_path, text)
    with pytest.raises(ValueError) as e:
        parse_config([path], DEFAULTS)
    message = str(e.value)
    assert message.startswith(f"config file {path}, line {line}: {kind}") and "\n" not in message, message


def test_error_in_an_included_file_names_that_file(tmp_path):
    base = write(tmp_path, "batch_size = 8\nraise RuntimeError('no GPU\\nhere')\n", name="base.py")
    variant = write(tmp_path, 'include("base.py")\n', name="variant.py")
    with pytest.raises(ValueError, match=rf"^config file {base}, line 2: RuntimeError: no GPU here$"):
        parse_config([variant], DEFAULTS)
    missing = write(tmp_path, 'batch_size = 8\ninclude("nope.py")\n', name="missing.py")
    with pytest.raises(ValueError, match=rf"^config file {missing}, line 2: FileNotFoundError: included .*nope\.py"):
        parse_config([missing], DEFAULTS)


def test_given_keys_are_reported(tmp_path):
    path = write(tmp_path, "batch_size = 12\n")  # set to its default: still given
    given = set()
    parse_config([path, "--compile=False"], DEFAULTS, given)
    assert given == {"batch_size", "compile"}


def test_check_device():
    import torch
    from configurator import check_device
    assert check_device("cpu") == "cpu"
    assert check_device("") == ("cuda" if torch.cuda.is_available() else "cpu")
    for bad in ("tpu", "cuda:x", "gpu0", "meta", "xla"):  # meta, xla: torch devices, not ones to run on
        with pytest.raises(ValueError, match=f"device='{bad}'.*allowed"):
            check_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            check_device("cuda:0")


def test_check_device_on_a_machine_with_two_gpus_and_without_mps(monkeypatch):
    """With CUDA (two GPUs stand in), '' is 'cuda' and cuda:0, cuda:1 are taken, cuda:2 is refused naming the range;
    'mps' where MPS is not available is refused by name."""
    import torch
    from configurator import check_device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert check_device("") == "cuda"
    assert [check_device(n) for n in ("cuda", "cuda:0", "cuda:1")] == ["cuda", "cuda:0", "cuda:1"]
    with pytest.raises(ValueError, match=r"device='cuda:2' but there are 2 CUDA devices: allowed cuda:0\.\.cuda:1"):
        check_device("cuda:2")
    with pytest.raises(ValueError, match="device='mps' but MPS is not available"):
        check_device("mps")


def test_make_current_sets_only_an_indexed_cuda_device(monkeypatch):
    """make_current makes cuda:N current and leaves a bare 'cuda' (already the current device) and other devices
    alone: torch 2.11's set_device raises for a device without an index, which broke train.py and sample.py at
    their default device on the GPU (session 36 call 1), a path no CPU run reaches without this stand-in."""
    import torch
    from configurator import make_current

    calls = []

    def strict_set_device(device):  # what torch 2.11 does: an index, or a ValueError
        if isinstance(device, torch.device) and device.index is None:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        calls.append(device)

    monkeypatch.setattr(torch.cuda, "set_device", strict_set_device)
    for name in ("cuda", "cpu", "mps"):
        make_current(torch.device(name))
    assert calls == []
    make_current(torch.device("cuda:1"))
    assert calls == [torch.device("cuda:1")]


def test_float64_sums_leave_an_apple_gpu_for_the_cpu(monkeypatch, tmp_path):
    """An Apple GPU ('mps', allowed by check_device) has no float64: a float64 tensor there raises TypeError, which
    split_loss's (every eval) and weight_checksums' (every run's end) sums would hit. float64_device sends them to
    the CPU for 'mps' and keeps them on every other device; both call it with the run's device. (No MPS machine
    here: the wiring is what is checked.)"""
    import types

    import numpy as np
    import torch

    import evaluate
    import train
    from configurator import float64_device
    from tiny import make

    cpu = torch.device("cpu")
    assert float64_device("mps") == cpu and float64_device(torch.device("mps:0")) == cpu
    assert float64_device("cuda:1") == torch.device("cuda:1") and float64_device(cpu) == cpu
    asked = []

    def stand_in(device):
        asked.append(torch.device(device))
        return cpu

    monkeypatch.setattr(evaluate, "float64_device", stand_in)
    monkeypatch.setattr(train, "float64_device", stand_in)
    model = make(dtype=torch.float32)
    path = tmp_path / "val.bin"
    np.random.default_rng(0).integers(0, 61, 400).astype(np.uint16).tofile(path)
    loss = evaluate.split_loss(model, str(path), 24, 2, 3, False, cpu)
    assert asked == [cpu] and math.isfinite(loss)
    run = types.SimpleNamespace(env=types.SimpleNamespace(fsdp=False, ddp=False, device=cpu), raw_model=model)
    assert len(train.weight_checksums(run)) == 1 and asked == [cpu, cpu]


def test_help_prints_the_docstring_and_every_default(capsys):
    """-h / --help anywhere: the script's docstring and each key with its default, no override error; otherwise
    nothing printed (the arguments go on to parse_config)."""
    defaults = {"batch_size": 12, "out_dir": "out"}
    assert not help_requested(["--batch_size=4"], "Train it.", defaults) and capsys.readouterr().out == ""
    for flag in ("--help", "-h"):
        assert help_requested(["config.py", flag], "Train it.\n", defaults)
        out = capsys.readouterr().out
        assert out.startswith("Train it.\n\nKeys") and "batch_size = 12" in out and "out_dir    = 'out'" in out


@pytest.mark.parametrize("script", ["train.py", "sample.py"])
def test_scripts_answer_help(script):
    import subprocess
    import sys
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, script, "--help"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Keys (config file" in done.stdout and "out_dir" in done.stdout, done.stderr


@pytest.mark.parametrize("device, native, emulated, want", [
    ("cuda", True, True, "bfloat16"),  # an A100 / H100: bfloat16 in hardware
    ("cuda", False, True, "float32"),  # a T4 / V100: torch emulates bfloat16, so its default answer says yes
    ("cuda", False, False, "float32"), ("cpu", True, True, "float32")])
def test_default_dtype_is_bfloat16_only_where_the_gpu_computes_in_it(device, native, emulated, want, monkeypatch):
    """dtype='' in train.py and sample.py: bfloat16 on a GPU of compute capability 8.0 and up, float32 elsewhere;
    is_bf16_supported's default (emulation counted) would pick bfloat16 on a T4."""
    import torch
    from configurator import default_dtype
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: native or (including_emulation and emulated))
    assert default_dtype(torch.device(device)) == want

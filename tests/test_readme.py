"""The README's two set-up commands, as written there: the main job runs to its end (scaled down by keys appended
to each command, its data and checkpoint in a temporary folder), and .ci/run runs exactly the test command. And every
command line in the bash blocks of the READMEs (README.md, results/, data/enwiki/; not the bench notebook) names real
train.py / sample.py keys and real flags of the module it runs.

On a machine with CUDA the main job runs at the scripts' default device, as a user's would: session 35 left
sample.py failing there at torch.cuda.set_device('cuda') and read the main job's traceback as success (session
36), which this test would have caught on the GPU."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def bash_blocks(text: str) -> list:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def main_job() -> list:
    """The main job's commands: the first bash block of "Set up and run", split at '&&'."""
    section = README.split("## Set up and run", 1)[1]
    line = bash_blocks(section)[0].strip()
    assert "\n" not in line, "the main job is one line to copy"
    return [shlex.split(part) for part in line.split("&&")]


def test_main_job_installs_then_runs_three_python_commands():
    commands = main_job()
    assert commands[0] == ["pip", "install", "-r", "requirements.txt"]
    assert [c[:3] for c in commands[1:]] == [["python", "-m", "data.shakespeare.prepare"],
                                             ["python", "train.py", "config/quickstart_tucker.py"],
                                             ["python", "sample.py", "--out_dir=out-quickstart-tucker"]]


def test_ci_runs_exactly_the_readmes_test_command():
    section = README.split("## Set up and run", 1)[1]
    test_command = next(b.strip() for b in bash_blocks(section) if "pytest" in b)
    assert test_command == "pip install -r requirements.txt && python -m pytest -q tests"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -r requirements.txt && python -m pytest -q tests\n" in ci  # -q: quiet pip, same command
    assert 'if [ "$rc" -eq 5 ]' in ci  # pytest's "no tests collected" fails CI


def test_main_job_runs_to_its_end(tmp_path, gpt2_ranks_file, shakespeare_txt):
    """prepare, train, sample as the README writes them, each with keys appended: the data and the run in tmp_path,
    2 iterations (evaluated at 0 and 2), 5 new tokens. Every command exits 0, the run writes its checkpoint, sample
    prints two samples."""
    data, out = tmp_path / "data", tmp_path / "out"
    appended = [["--out_dir", str(data)],
                [f"--data_dir={data}", f"--out_dir={out}", "--max_iters=2", "--lr_decay_iters=2", "--warmup_iters=1",
                 "--eval_interval=2", "--eval_iters=1", "--log_interval=1"],
                [f"--out_dir={out}", "--max_new_tokens=5"]]
    env = {**os.environ, "TUCKER_GPT2_TIKTOKEN": str(gpt2_ranks_file), "TUCKER_SHAKESPEARE_TXT": str(shakespeare_txt)}
    outputs = []
    for command, extra in zip(main_job()[1:], appended):
        assert command[0] == "python"
        run = subprocess.run([sys.executable, *command[1:], *extra], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=240)
        assert run.returncode == 0, f"{shlex.join(command)} exited {run.returncode}:\n{run.stderr[-3000:]}"
        outputs.append(run)
    assert (data / "train.bin").stat().st_size > 0 and (out / "ckpt.pt").exists()
    assert outputs[2].stdout.count("---------------") == 2, outputs[2].stdout  # --num_samples=2 from the README
    assert "tokens/s" in outputs[2].stderr


# ---------------------------------------------------------------------------------------
# Every command line of the READMEs' bash blocks names real keys and real flags

DOCS = ["README.md", "results/README.md", "data/enwiki/README.md",
        *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("results/*/README.md") if p.parent.name != "bench")]
SEPARATORS = {"&&", "||", "|", ";"}


def doc_commands() -> list:
    """[(doc, argv)]: every command of the docs' bash blocks (continued lines joined, comments dropped, split at
    && | ;)."""
    commands = []
    for doc in DOCS:
        for block in bash_blocks((ROOT / doc).read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                argv = []
                for token in shlex.split(line, comments=True) + ["&&"]:
                    if token in SEPARATORS:
                        if argv:
                            commands.append((doc, argv))
                        argv = []
                    else:
                        argv.append(token)
    return commands


def test_the_docs_train_and_sample_commands_name_real_keys():
    """Each train.py / sample.py command (and the train.py keys after a sweep's or bench_multigpu's bare --) parses
    as the script parses it: known keys, values of the default's type, a train.py model that GPTConfig accepts."""
    from dataclasses import fields

    import sample
    import train
    from configurator import parse_config
    from model import GPTConfig

    checked = 0
    for doc, argv in doc_commands():
        script = next((t for t in argv if t in ("train.py", "sample.py")), None)
        if script:
            args = argv[argv.index(script) + 1:]
        elif argv[1:3] in (["-m", "scripts.sweep"], ["-m", "scripts.bench_multigpu"]) and "--" in argv:
            script, args = "train.py", argv[argv.index("--") + 1:]
        else:
            continue
        try:
            cfg = parse_config(args, train.DEFAULTS if script == "train.py" else sample.DEFAULTS)
            if script == "train.py" and any(a.endswith(".py") for a in args):  # a whole model: its keys together
                GPTConfig(**{f.name: cfg[f.name] for f in fields(GPTConfig)})
        except (ValueError, FileNotFoundError) as e:
            pytest.fail(f"{doc}: {script} {shlex.join(args)}: {e}")
        checked += 1
    assert checked >= 20, checked  # the READMEs' examples, the sweeps' and benchmarks' train.py keys


def test_the_docs_module_commands_name_real_flags():
    """Each `python -m scripts.X` / `python -m data.X.prepare` command runs a module of the repository, and every
    --flag it gives (before a bare --, after which train.py's keys go) is an option that module defines."""
    checked = 0
    for doc, argv in doc_commands():
        if argv[:2] != ["python", "-m"] or len(argv) < 3 or not argv[2].startswith(("scripts.", "data.")):
            continue
        path = ROOT / (argv[2].replace(".", "/") + ".py")
        assert path.is_file(), f"{doc}: {shlex.join(argv)}: no module {argv[2]}"
        # its own source and that of the repository's modules it imports (bench_train's add_common_args, ...)
        source = path.read_text()
        source += "".join((ROOT / (m.replace(".", "/") + ".py")).read_text()
                          for m in set(re.findall(r"^\s*from (scripts\.\w+) import", source, flags=re.M)))
        args = argv[3:argv.index("--")] if "--" in argv else argv[3:]
        for flag in (a.split("=", 1)[0] for a in args if a.startswith("--")):
            known = f'"{flag}"' in source or (flag.startswith("--no-") and f'"--{flag[5:]}"' in source)
            assert known, f"{doc}: {shlex.join(argv)}: {argv[2]} defines no {flag}"
            checked += 1
    assert checked >= 40, checked

"""scripts/shared_memory_survey: the shared memory of the kernels' launches compiled for sm_75, sm_80, sm_86, sm_90,
sm_100 and sm_120 on a machine without a GPU, each against what one program may take on that GPU."""
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parent.parent


def test_survey_compiles_a_launch_for_each_arch(tmp_path):
    """One kernel's launches (fused_norm's add_norm, both norms) compiled for the six archs: its row holds a
    number for each, none over, no compile error, and the file names the command."""
    out = tmp_path / "survey.md"
    r = subprocess.run([sys.executable, "-m", "scripts.shared_memory_survey", "-k", "add_norm", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    text = out.read_text()
    assert text.startswith("`python -m scripts.shared_memory_survey -k 'add_norm'`")
    row = next(line for line in text.splitlines() if line.startswith("| `_add_norm_kernel`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "2 (0)" and all(c.replace(",", "").isdigit() for c in cells[2:]) and len(cells) == 8
    assert "Compile errors: none" in text


def test_survey_marks_a_launch_over_a_gpus_limit():
    """A kernel's largest launch above a GPU's limit is marked there and only there; a PDL launch is counted on sm_90
    and later alone, its other cells left empty; an error is listed."""
    from scripts.shared_memory_survey import PER_PROGRAM, Survey
    s = Survey()
    s.rows["_k"] = {75: 65_536, 80: 120_000, 86: 120_000, 90: 120_000, 100: 120_000, 120: 120_000}
    s.rows["_t4"] = {75: 65_537, 80: 10, 86: 10, 90: 10, 100: 10, 120: 10}
    s.rows["_pdl"] = {90: 10, 100: 10, 120: 10}
    s.launches.update({"_k": 3, "_t4": 1, "_pdl": 1})
    s.pdl_only["_pdl"] = 1
    s.errors.append("_x sm_80: PTXASError: ...")
    lines = s.table().splitlines()
    assert lines[2] == "| `_k` | 3 (0) | 65,536 | 120,000 | 120,000 **over** | 120,000 | 120,000 | 120,000 **over** |"
    assert lines[3] == "| `_pdl` | 1 (1) | - | - | - | 10 | 10 | 10 |"
    assert lines[4] == "| `_t4` | 1 (0) | 65,537 **over** | 10 | 10 | 10 | 10 | 10 |"
    assert PER_PROGRAM[80] > 120_000 > PER_PROGRAM[86] and PER_PROGRAM[75] == 65_536  # a T4: no 1 KB reserved
    assert "- _x sm_80: PTXASError: ..." in lines


def test_k_up_table_compiles_each_case_under_its_bound(monkeypatch):
    """--k_up: a case's launch at its own rows and stages compiled for sm_75, sm_80 and sm_90, each within
    k_up_shared_bytes, and k_up_launch's pick on each GPU (a small latent: K_UP_ROWS at 3 stages everywhere)."""
    import fused_mla_rope as fm
    from scripts import shared_memory_survey as survey
    monkeypatch.setattr(survey, "K_UP_CASES", [("float32", 32, 4, 16, 8, 32, 1)])
    row = survey.k_up_table().splitlines()[2]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:4] == ["float32", "32", "4 x 16", "32, 1"]
    sm75, sm80, sm90 = (int(c.replace(",", "")) for c in cells[4:7])
    bound, bound75 = (int(c.strip("()").replace(",", "")) for c in cells[7].split())
    assert 0 < sm80 <= bound and 0 < sm90 <= bound == fm.k_up_shared_bytes(32, 1, 32, 16, 4)
    assert 0 < sm75 <= bound75 == fm.k_up_shared_bytes(32, 1, 32, 16, 4, pipelined=False)
    assert cells[8] == " / ".join([f"{fm.K_UP_ROWS}, 3"] * 6)
    assert fm.k_up_launch is not None and fm._k_up_fwd_kernel.__class__.__name__ == "JITFunction"  # restored


def test_survey_compiles_a_pdl_launch_for_sm_90_and_later_only():
    """note(): a launch with programmatic dependent launch (the wrappers launch it so from sm_90 on) is compiled for
    sm_90, sm_100 and sm_120; any other for every arch; a compile error is listed and the survey goes on."""
    from types import SimpleNamespace

    from scripts.shared_memory_survey import ARCHS, Survey
    s, compiled = Survey(), []

    def compile_launch(kernel, args, kwargs, arch):
        compiled.append((kernel.fn.__name__, arch))
        if arch == 86 and kernel.fn.__name__ == "_bad":
            raise RuntimeError("ptxas failed\nmore")
        return SimpleNamespace(metadata=SimpleNamespace(shared=arch))

    kernel = lambda name: SimpleNamespace(fn=SimpleNamespace(__name__=name))  # noqa: E731
    s.note(kernel("_pdl"), (), {"PDL": True}, compile_launch)
    s.note(kernel("_bad"), (), {"PDL": False}, compile_launch)
    assert [a for n, a in compiled if n == "_pdl"] == [90, 100, 120]
    assert [a for n, a in compiled if n == "_bad"] == list(ARCHS) == [75, 80, 86, 90, 100, 120]
    assert s.rows["_pdl"] == {90: 90, 100: 100, 120: 120} and 86 not in s.rows["_bad"]
    assert s.pdl_only["_pdl"] == 1 and s.errors == ["_bad sm_86: RuntimeError: ptxas failed"]

"""scripts/gpu_tests.py and the suite's --gpu_only (tests/conftest.py): which tests need a GPU, how they are shared
out into jobs, and a run's outcomes read back, on the CPU (the runs themselves are tiny synthetic test files)."""
import re
import shutil
from pathlib import Path

import pytest

from scripts import gpu_tests

HERE = Path(__file__).resolve().parent

SYNTHETIC = '''
import pytest
import torch

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


@needs_cuda
def test_gpu_marked():
    pass


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("n", [1, 2])
def test_gpu_param(n):
    pass


@pytest.mark.skipif(CUDA, reason="a test for a machine without CUDA")
def test_cpu_only():
    pass


@pytest.mark.skipif(True, reason="runs in the TRITON_INTERPRET=1 child")
def test_interp():
    pass


@pytest.mark.skipif(not CUDA, reason="needs a compiler")
def test_other_reason():
    pass


def test_plain():
    pass


class TestGroup:
    @needs_cuda
    def test_in_class(self):
        pass
'''


def test_gpu_only_selects_the_tests_a_cpu_run_skips_for_want_of_a_gpu(tmp_path):
    """The suite's conftest over a synthetic file: a skipif that skips where CUDA is missing, for a GPU or CUDA
    reason, selects a test (in a class and parametrized too); a skip for a machine without CUDA, the interpreted
    child's, another reason, or none do not."""
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_synthetic.py").write_text(SYNTHETIC)
    nodes = gpu_tests.collect(".", cwd=tmp_path)
    assert nodes == ["test_synthetic.py::test_gpu_marked", "test_synthetic.py::test_gpu_param[1]",
                     "test_synthetic.py::test_gpu_param[2]", "test_synthetic.py::TestGroup::test_in_class"]


def test_dry_run_plans_every_gpu_test_of_the_suite(monkeypatch, capsys):
    """The suite's own selection: every node names a GPU or CUDA, every `test_cuda_*` function of the suite is among
    them, and the plan's jobs hold each selected test once."""
    collected, real_collect = [], gpu_tests.collect

    def collect(*args, **kwargs):  # the real collection, its node ids kept for the checks below
        collected.extend(real_collect(*args, **kwargs))
        return list(collected)

    monkeypatch.setattr(gpu_tests, "collect", collect)
    assert gpu_tests.main(["--dry_run", "--jobs", "9"]) == 0
    out = capsys.readouterr().out
    assert collected and all(re.search("cuda|gpu", n, re.IGNORECASE) for n in collected)
    names = {n.split("::")[-1].split("[")[0] for n in collected}
    marked = set()  # every test function under the suite's @needs_cuda marker, read from the source
    for path in HERE.glob("test_*.py"):
        if path.name == Path(__file__).name:  # its synthetic files' markers are strings
            continue
        under_marker = False
        for line in path.read_text().splitlines():
            under_marker = under_marker or line == "@needs_cuda"
            if under_marker and line.startswith("def "):
                marked.add(line[4:].split("(")[0])
                under_marker = False
    assert len(marked) >= 30 and marked <= names, sorted(marked - names)
    counts = [int(m) for m in re.findall(r"^  job \d+: (\d+) tests", out, re.M)]
    assert len(counts) == 9 and sum(counts) == len(collected)
    assert out.startswith(f"{len(collected)} GPU tests in 9 jobs")


NODES = ([f"tests/test_decode_mega.py::test_step[{i}]" for i in range(25)]
         + [f"tests/test_decode_wide.py::test_wide[{i}]" for i in range(16)]
         + [f"tests/test_master_adamw.py::test_m{i}" for i in range(9)]
         + [f"tests/test_graph_step.py::test_g{i}" for i in range(5)]
         + [f"tests/test_decode_linear.py::test_l{i}" for i in range(74)]
         + [f"tests/test_sample.py::test_s{i}" for i in range(3)])


@pytest.mark.parametrize("jobs", [1, 2, 4, 9, 200])
def test_plan_shares_every_test_once_and_evenly(jobs):
    lists = gpu_tests.plan(NODES, jobs)
    total = sum(map(gpu_tests.weight, NODES))
    share = total / jobs
    files = {n.split("::")[0] for n in NODES}
    units = {f: [n for n in NODES if n.startswith(f + "::")] for f in files}
    whole = {f for f, nodes in units.items() if sum(map(gpu_tests.weight, nodes)) <= share}
    n_units = len(whole) + sum(len(nodes) for f, nodes in units.items() if f not in whole)
    flat = [n for job in lists for n in job]
    assert sorted(flat) == sorted(NODES) and len(lists) == min(jobs, n_units) and all(lists)
    for job in lists:  # collection order within a job
        assert job == sorted(job, key=NODES.index)
    loads = [sum(map(gpu_tests.weight, job)) for job in lists]
    assert sum(loads) == pytest.approx(total)
    for f in whole:  # a file within a job's share stays in one job
        assert sum(any(n.startswith(f + "::") for n in job) for job in lists) == 1, f
    biggest = max([sum(map(gpu_tests.weight, units[f])) for f in whole] + [max(map(gpu_tests.weight, NODES))])
    assert max(loads) <= share + biggest  # the greedy's bound: no job more than one unit over the even share


def test_plan_refuses_bad_input():
    with pytest.raises(ValueError, match="jobs"):
        gpu_tests.plan(NODES, 0)
    with pytest.raises(ValueError, match="distinct"):
        gpu_tests.plan(NODES + NODES[:1], 3)


def test_junit_key_is_pytests_own():
    assert gpu_tests.junit_key("tests/test_a.py::test_b[x-1.5]") == ("tests.test_a", "test_b[x-1.5]")
    assert gpu_tests.junit_key("tests/sub/test_a.py::TestC::test_d") == ("tests.sub.test_a.TestC", "test_d")
    assert gpu_tests.junit_key("test_a.py::test_b[a::b]") == ("test_a", "test_b[a::b]")


RUN = '''
import time

import pytest


def test_pass():
    pass


@pytest.mark.parametrize("v", ["a-1", "b-2"])
def test_param(v):
    assert v != "b-2", "the second fails"


@pytest.mark.skip(reason="a skip")
def test_skipped():
    pass


class TestK:
    def test_method(self):
        pass


def test_quick():
    pass


def test_slow():
    time.sleep(60)
'''


def test_run_jobs_reads_each_outcome_and_stops_a_job_past_its_timeout(tmp_path, capsys):
    """Three jobs from a synthetic folder: outcomes by node id from each job's JUnit XML (a failure, a skip, a
    parameter, a class), a job past the timeout stopped (what its log says ended before that; the rest 'not run'), and the summary and
    verdict that follow; then the same jobs without the slow test and the failure pass."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_run.py").write_text(RUN)
    f = "test_run.py::"
    lists = [[f + "test_pass", f + "test_param[a-1]", f + "test_param[b-2]"], [f + "test_skipped", f + "TestK::test_method"],
             [f + "test_quick", f + "test_slow"]]
    results = gpu_tests.run_jobs(lists, tmp_path / "out", timeout=6.0, cwd=tmp_path)
    assert [r.rc for r in results] == [1, 0, None]
    assert results[0].outcomes == {f + "test_pass": "passed", f + "test_param[a-1]": "passed",
                                   f + "test_param[b-2]": "failed"}
    assert results[1].outcomes == {f + "test_skipped": "skipped", f + "TestK::test_method": "passed"}
    assert results[2].outcomes == {f + "test_quick": "passed"}  # read from its -v log: no JUnit XML was written
    assert results[2].not_run == [f + "test_slow"] and results[2].seconds >= 6.0
    assert "past 6 s, stopped" in capsys.readouterr().out
    text = gpu_tests.summary_md(results, "cmd")
    assert "| 0 | 3 | 2 | 1 | 0 | 0 | 0 | 1 |" in text and "| 2 | 2 | 1 | 0 | 0 | 0 | 1 | killed |" in text
    assert f"- `{f}test_param[b-2]`: failed" in text and f"- `{f}test_slow`: not run" in text
    assert not gpu_tests.ok(results)
    assert "test_pass PASSED" in (tmp_path / "out" / "job0.log").read_text()

    good = gpu_tests.run_jobs([lists[0][:2], lists[1]], tmp_path / "out", cwd=tmp_path)
    assert gpu_tests.ok(good) and [r.rc for r in good] == [0, 0]
    assert "Every selected test ran; none failed (3 passed, 1 skipped)." in gpu_tests.summary_md(good, "cmd")


def test_main_refuses_without_a_gpu_and_bad_options(capsys):
    if __import__("torch").cuda.is_available():
        pytest.skip("a test for a machine without CUDA")
    assert gpu_tests.main([]) == 2
    assert "no CUDA device here" in capsys.readouterr().err
    for bad, word in ((["--jobs", "0"], "--jobs"), (["--timeout", "-1"], "--timeout")):
        with pytest.raises(SystemExit) as e:
            gpu_tests.main(bad)
        assert e.value.code == 2 and word in capsys.readouterr().err

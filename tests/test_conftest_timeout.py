"""The suite's per-test time limit (tests/conftest.py): a hung test fails with its stacks printed, and
the run goes on; a subprocess the test waited on is killed."""
import shutil
import subprocess
import sys
import time
from pathlib import Path

HUNG = '''
import subprocess, time

def test_sleeps():
    time.sleep(600)

def test_waits_on_a_child(tmp_path):
    subprocess.run(["sleep", "600"])

def test_after():
    assert True
'''


STUCK = '''
import signal, time

def test_stuck():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # as if stuck in C: the alarm cannot raise
    time.sleep(600)

def test_never_reached():
    assert True
'''


def run_pytest(tmp_path, test_file: str):
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_it.py").write_text(test_file)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "TUCKER_TEST_TIMEOUT": "2"})


def test_a_hung_test_fails_and_the_run_goes_on(tmp_path, processes_running):
    t0 = time.time()
    proc = run_pytest(tmp_path, HUNG)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "2 failed, 1 passed" in out, out
    assert out.count("ran past 2 s (TUCKER_TEST_TIMEOUT)") >= 2, out
    assert "in test_sleeps" in out and "test_it.py" in out  # the stacks name where it hung
    assert time.time() - t0 < 60
    assert processes_running("sleep", "600") == []  # the child it waited on is gone


def test_a_test_that_cannot_be_interrupted_ends_the_run(tmp_path):
    """The alarm cannot raise in a test stuck in C (here: the signal blocked): faulthandler prints the
    stacks to the run's own stderr and ends the run with exit code 1, 2 x TUCKER_TEST_TIMEOUT on (2 + 2 s here)."""
    t0 = time.time()
    proc = run_pytest(tmp_path, STUCK)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Timeout" in proc.stderr and "in test_stuck" in proc.stderr, proc.stderr
    assert "passed" not in proc.stdout  # the run ended there
    assert time.time() - t0 < 30

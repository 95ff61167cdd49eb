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


def test_a_hung_test_fails_and_the_run_goes_on(tmp_path):
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_hung.py").write_text(HUNG)
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "TUCKER_TEST_TIMEOUT": "2"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "2 failed, 1 passed" in out, out
    assert out.count("ran past 2 s (TUCKER_TEST_TIMEOUT)") >= 2, out
    assert "in test_sleeps" in out and "test_hung.py" in out  # the stacks name where it hung
    assert time.time() - t0 < 60
    sleepers = [c for c in Path("/proc").glob("[0-9]*/cmdline") if _read(c) == b"sleep\x00600\x00"]
    assert sleepers == []  # the child it waited on is gone


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # a process that ended meanwhile
        return b""

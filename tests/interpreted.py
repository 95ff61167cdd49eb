"""Triton kernels tested on the CPU: Triton's interpreter (TRITON_INTERPRET=1, CPU tensors) in a child pytest.

The interpreter must be switched on before triton is first imported, and another test may already have
imported it in this process, so a parent test (`run_interpreted`, called by tests/test_interpreted.py) runs the
interpreted tests (those named `*interp_*`, marked `needs_child`) of every file that has them in one fresh
process with the variable set, and fails unless they all ran and passed. fp32 and fp16 only: the 3.6
interpreter's tl.dot gets bf16 wrong (bf16 runs on the GPU).
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHILD = os.environ.get("TUCKER_TRITON_INTERPRETED") == "1"  # set in the interpreter child
needs_child = pytest.mark.skipif(not CHILD, reason="runs in the TRITON_INTERPRET=1 child (run_interpreted)")

if CHILD:
    # Triton 3.6's interpreter calls int() on 1-element arrays, which numpy >= 2.4 refuses (dynamic
    # loop bounds fail): triton-lang/triton#9171, fixed upstream after 3.6. Same fix, test-only.
    import triton.runtime.interpreter as _interp

    _patch_lang_tensor = _interp._patch_lang_tensor

    def _patched(tensor, scope):
        _patch_lang_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(())))

    _interp._patch_lang_tensor = _patched


def start_interpreted(*test_files, nice: int = 0) -> dict:
    """Start the test files' `interp_` tests in one TRITON_INTERPRET=1 child, its output into a temporary file (a
    pipe left unread would fill and stop it); `nice` lowers its priority (run beside the other tests, it yields the
    CPU to them). Returns the handle finish_interpreted takes."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "TUCKER_TRITON_INTERPRETED": "1",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    out = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                             *map(str, test_files), "-k", "interp_"],
                            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=(lambda: os.nice(nice)) if nice else None)
    return dict(proc=proc, out=out, started=time.monotonic())


def finish_interpreted(run: dict, timeout: float) -> None:
    """Wait for start_interpreted's child until `timeout` seconds after its start (then kill it and fail); fail unless
    every test it collected ran and passed."""
    proc = run["proc"]
    try:
        proc.wait(timeout=max(1.0, timeout - (time.monotonic() - run["started"])))
    finally:
        stop_interpreted(run)
    with run["out"] as out:
        out.seek(0)
        text = out.read()
    assert proc.returncode == 0, text[-6000:]
    assert " passed" in text and "skipped" not in text.strip().splitlines()[-1], text[-2000:]


def stop_interpreted(run: dict, discard: bool = False) -> None:
    """Kill start_interpreted's child if it still runs (a run that ends early, a timeout); discard: its output too
    (no test will read it)."""
    if run["proc"].poll() is None:
        run["proc"].kill()
        run["proc"].wait()
    if discard:
        run["out"].close()


def run_interpreted(*test_files, timeout: int = 300) -> None:
    """Run the test files' `interp_` tests in one TRITON_INTERPRET=1 child and wait for it; fail unless all ran and
    passed."""
    finish_interpreted(start_interpreted(*test_files), timeout)

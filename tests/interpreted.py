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

    # Triton 3.6's interpreter patches triton.language for each launch (GridExecutor.__call__, restored at its end)
    # and again at every call of a @triton.jit helper inside the kernel (InterpretedFunction.__call__), though the
    # launch has patched those same modules: five inspect.getmembers walks of the language a call, whose builtins
    # are already replaced (so they change nothing), and the same stateless functions set again (cProfile of
    # decode_mega's batch-3 GQA case: 36 of its 77 s in _patch_lang; without it this child took 590 s, with it 361).
    # Test-only, like the fix above: inside a launch, a helper whose language modules the launch (or an earlier
    # helper of it: tl.sum's module sees triton.language.core) has patched is not patched again; every other call
    # goes to Triton's own _patch_lang unchanged.
    import inspect as _inspect

    import triton.language as _tl

    PATCHED = [None]  # in a running launch: the language modules patched so far (ids); None outside launches
    SKIPPED = [0]  # helper calls not patched again (tests/test_interpreted.py checks the shim is in use)
    _patch_lang = _interp._patch_lang
    _grid_call = _interp.GridExecutor.__call__

    _LANGS = {}  # per function: the ids of the language modules among its globals

    def _langs(fn) -> frozenset:
        if fn not in _LANGS:
            _LANGS[fn] = frozenset(id(v) for v in fn.__globals__.values()
                                   if _inspect.ismodule(v) and v in (_tl, _tl.core))
        return _LANGS[fn]

    def _patch_lang_once(fn):
        langs, patched = _langs(fn), PATCHED[0]
        if patched is not None:
            if langs and langs <= patched:  # (none: Triton's own path, whose assertion says so)
                SKIPPED[0] += 1
                return _interp._LangPatchScope()  # nothing set, nothing to restore
            patched |= langs  # the launch's own call, or a helper seeing another module: Triton's path, after
            #                   which that module stays patched (Triton never restores a helper's patch)
        return _patch_lang(fn)

    def _grid_call_tracked(self, *args, **kwargs):
        PATCHED[0] = set()  # (launches do not nest)
        try:
            return _grid_call(self, *args, **kwargs)
        finally:
            PATCHED[0] = None

    _interp._patch_lang = _patch_lang_once
    _interp.GridExecutor.__call__ = _grid_call_tracked


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

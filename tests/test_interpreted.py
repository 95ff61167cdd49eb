"""Every Triton kernel on the CPU: the `interp_` tests of each test file that has them (marked `needs_child`:
decode attention, decode_linear, the fused norm, the fused loss head, the whole decode step through the
kernels) run in ONE child pytest with Triton's interpreter switched on (tests/interpreted.py), which fails
unless all of them ran and passed. One child, not one per file: each child pays Python, torch and triton
imports and a collection, seconds of the CI budget. Where test_kernels_interpreted is collected, the child starts as
collection ends (conftest.py) and runs beside the other tests, at a lower priority, and the test, moved to the end of
the run, waits for it: the interpreted tests are minutes of the suite (256 s of 728 on the 2-core machine alone;
590 s on session 57's slower one, 361 s with tests/interpreted.py's shim for Triton's re-patching)."""
import importlib.util
from pathlib import Path

import pytest

from interpreted import CHILD, finish_interpreted, run_interpreted, start_interpreted, stop_interpreted

HERE = Path(__file__).resolve().parent
# every test file with interpreted tests: found, not listed, so that a new one cannot be left out
FILES = sorted(p for p in HERE.glob("test_*.py") if p.name != Path(__file__).name and "@needs_child" in p.read_text())


def test_the_interpreted_files_are_found():
    names = {p.name for p in FILES}
    assert {"test_decode.py", "test_decode_attention.py", "test_decode_linear.py", "test_fused_loss.py",
            "test_fused_norm.py"} <= names


TIMEOUT_S = 900  # the child's time from its start
BESIDE_NICE = 10  # the child's priority below the other tests' (os.nice) while they run beside it
BESIDE = {}  # the child started beside the other tests (conftest.py: start_beside), until the test waits for it


def start_beside() -> None:
    """Start the interpreted child now, beside the tests still to run (conftest.py, once collection has ended)."""
    if not CHILD and not BESIDE and importlib.util.find_spec("triton") is not None:
        BESIDE["run"] = start_interpreted(*FILES, nice=BESIDE_NICE)


def stop_beside() -> None:
    """Kill a child started beside the tests that no test waited for (the run ended early: -x, Ctrl-C)."""
    if BESIDE:
        stop_interpreted(BESIDE.pop("run"), discard=True)


@pytest.mark.skipif(CHILD, reason="this is the parent of the interpreted run")
def test_kernels_interpreted():
    pytest.importorskip("triton")
    if BESIDE:
        finish_interpreted(BESIDE.pop("run"), TIMEOUT_S)
    else:
        run_interpreted(*FILES, timeout=TIMEOUT_S)


def test_a_failing_child_fails_its_waiting_test(tmp_path):
    """The child beside the tests is judged as the child waited for: a test failing in it fails the waiting test
    with its output, and one that passes passes (a test file outside the suite: no conftest, no torch, ~1 s)."""
    bad = tmp_path / "test_bad.py"
    bad.write_text("def test_interp_one():\n    assert 1 + 1 == 3, 'the child ran this'\n")
    run = start_interpreted(bad, nice=BESIDE_NICE)
    with pytest.raises(AssertionError, match="the child ran this"):
        finish_interpreted(run, 120)
    bad.write_text("def test_interp_one():\n    assert 1 + 1 == 2\n")
    finish_interpreted(start_interpreted(bad), 120)


SHIM_TEST = '''
import sys
sys.path.insert(0, {tests!r})
import interpreted  # the child's shims (TUCKER_TRITON_INTERPRETED=1)
import torch
import triton
import triton.language as tl


@triton.jit
def _double(x):
    return x * 2


@triton.jit
def _plus_program(x):
    return _double(x) + tl.program_id(0)  # a helper calling a helper


@triton.jit
def _kernel(x_ptr, out_ptr, HALF: tl.constexpr):
    offs = tl.program_id(0) * HALF + tl.arange(0, HALF)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, _plus_program(_double(x)) + tl.sum(x, axis=0))  # tl.sum: a helper of triton's own


def test_interp_helpers_inside_a_launch_and_the_language_restored_after_it():
    names = ("load", "store", "arange", "program_id", "sum", "range", "static_range")
    before = {{name: getattr(tl, name) for name in names}}
    patched, patch_lang = [], interpreted._patch_lang

    def count(fn):  # Triton's own _patch_lang, where the shim calls it
        patched.append(fn.__name__)
        return patch_lang(fn)

    interpreted._patch_lang = count
    x = torch.arange(8, dtype=torch.float32)
    skipped = interpreted.SKIPPED[0]
    for _ in range(2):  # a second launch patches afresh
        out = torch.empty_like(x)
        _kernel[(2,)](x, out, HALF=4)
        want = x * 4 + torch.tensor([0.0] * 4 + [1.0] * 4) + torch.tensor([6.0] * 4 + [22.0] * 4)
        torch.testing.assert_close(out, want, rtol=0, atol=0)
        assert {{name: getattr(tl, name) for name in names}} == before  # nothing left patched
        assert interpreted.PATCHED[0] is None  # no launch state left
    # each launch: Triton patches for the kernel and for tl.sum's module (it sees triton.language.core), once each
    assert patched == ["_kernel", "sum"] * 2, patched
    assert interpreted.SKIPPED[0] - skipped >= 2 * 2 * 3  # at least our 3 helper calls a program, none patched again
'''


def test_the_interpreter_shim_runs_helpers_and_leaves_the_language_as_it_was(tmp_path):
    """tests/interpreted.py's shim (helpers inside a launch not re-patching triton.language): in a TRITON_INTERPRET
    child, helper calls (one nested) compute what they should, every one of them skips the re-patch, and after
    each launch triton.language's builtins are Triton's own again."""
    pytest.importorskip("triton")
    test = tmp_path / "test_shim.py"
    test.write_text(SHIM_TEST.format(tests=str(HERE)))
    finish_interpreted(start_interpreted(test), 120)

"""Every Triton kernel on the CPU: the `interp_` tests of each test file that has them (marked `needs_child`:
decode attention, decode_linear, the fused norm, the fused loss head, the whole decode step through the
kernels) run in ONE child pytest with Triton's interpreter switched on (tests/interpreted.py), which fails
unless all of them ran and passed. One child, not one per file: each child pays Python, torch and triton
imports and a collection, seconds of the CI budget."""
from pathlib import Path

import pytest

from interpreted import CHILD, run_interpreted

HERE = Path(__file__).resolve().parent
# every test file with interpreted tests: found, not listed, so that a new one cannot be left out
FILES = sorted(p for p in HERE.glob("test_*.py") if p.name != Path(__file__).name and "@needs_child" in p.read_text())


def test_the_interpreted_files_are_found():
    names = {p.name for p in FILES}
    assert {"test_decode.py", "test_decode_attention.py", "test_decode_linear.py", "test_fused_loss.py",
            "test_fused_norm.py"} <= names


@pytest.mark.skipif(CHILD, reason="this is the parent of the interpreted run")
def test_kernels_interpreted():
    pytest.importorskip("triton")
    run_interpreted(*FILES, timeout=900)

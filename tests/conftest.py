"""Shared test fixtures: offline paths to the GPT-2 ranks file and tiny Shakespeare.

Both live in ../shared beside the checkout (never committed). The environment variables
TUCKER_GPT2_TIKTOKEN and TUCKER_SHAKESPEARE_TXT override the locations.
"""
import contextlib
import os
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

GPT2_TIKTOKEN = Path(os.environ.get("TUCKER_GPT2_TIKTOKEN", SHARED / "tokenizers" / "gpt2.tiktoken"))
SHAKESPEARE_TXT = Path(os.environ.get("TUCKER_SHAKESPEARE_TXT", SHARED / "data" / "tinyshakespeare" / "input.txt"))


@pytest.fixture(scope="session")
def gpt2_ranks_file() -> Path:
    if not GPT2_TIKTOKEN.exists():
        pytest.fail(f"offline GPT-2 ranks file missing: {GPT2_TIKTOKEN} (set TUCKER_GPT2_TIKTOKEN)")
    return GPT2_TIKTOKEN


@pytest.fixture(scope="session")
def shakespeare_txt() -> Path:
    if not SHAKESPEARE_TXT.exists():
        pytest.fail(f"tiny Shakespeare missing: {SHAKESPEARE_TXT} (set TUCKER_SHAKESPEARE_TXT)")
    return SHAKESPEARE_TXT


@pytest.fixture
def small_data(tmp_path) -> Path:
    """train.bin and val.bin of 3,000 random token ids below 64 (a 1-layer model's vocabulary) in tmp_path/data."""
    import numpy as np
    d = tmp_path / "data"
    d.mkdir()
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        rng.integers(0, 64, 3000).astype(np.uint16).tofile(d / f"{split}.bin")
    return d


@pytest.fixture
def hanging_pool_terminate(monkeypatch):
    """CPython's Pool.terminate hanging (python/cpython#73945), as a stand-in: terminate waits 3 s (or until the test
    sets the returned event), then ends the workers for real; Pool.join only records its pool (a pool whose terminate
    hangs must not be joined: that waits on the same stuck thread). Returns (joined, release); a module's
    terminate_pool under test is given a 0.2 s limit with the `bounded(module)` the fixture also returns."""
    import multiprocessing.pool
    import threading

    import atomic_files
    real_terminate, release, joined = multiprocessing.pool.Pool.terminate, threading.Event(), []

    def hangs(pool):
        release.wait(3)
        real_terminate(pool)

    monkeypatch.setattr(multiprocessing.pool.Pool, "terminate", hangs)
    monkeypatch.setattr(multiprocessing.pool.Pool, "join", lambda pool: joined.append(pool))

    def bounded(module):  # raising=False: the code before terminate_pool did not import it
        monkeypatch.setattr(module, "terminate_pool", lambda pool: atomic_files.terminate_pool(pool, timeout=0.2),
                            raising=False)
    yield joined, release, bounded
    release.set()  # the stand-in's terminates end their workers now


@pytest.fixture
def processes_running():
    """processes_running(*words): the pids of live processes whose command line holds those words in a row."""
    def find(*words: str) -> list:
        wanted = "\x00".join(words).encode()
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if wanted in cmdline.read_bytes():
                    found.append(int(cmdline.parent.name))
            except OSError:  # ended meanwhile
                continue
        return found
    return find


# A hung test must fail, not hold CI until its own time limit: each phase of a test (setup, call,
# teardown) gets TUCKER_TEST_TIMEOUT seconds. Then every thread's stack is printed and the test fails
# with TestTimeout (a subprocess.run it was waiting on kills its child); if the interpreter is stuck in
# C code and cannot raise, faulthandler prints the stacks again and ends the whole run (exit 1) a fifth
# of the limit later (at least 10 s, or the limit itself where it is shorter: the suite's own test of this
# runs at a 2-s limit).
TEST_TIMEOUT_S = int(os.environ.get("TUCKER_TEST_TIMEOUT", 300))
HARD_EXIT_S = TEST_TIMEOUT_S + max(min(10, TEST_TIMEOUT_S), TEST_TIMEOUT_S // 5)


class TestTimeout(Exception):
    pass


_TERMINAL = []  # a copy of the run's own stderr (not a test's captured one): the hard exit's stacks go there


def pytest_configure(config):
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        _TERMINAL.append(os.fdopen(os.dup(2), "w"))


def _on_alarm(signum, frame):
    import faulthandler
    faulthandler.dump_traceback(all_threads=True)
    raise TestTimeout(f"this test phase ran past {TEST_TIMEOUT_S} s (TUCKER_TEST_TIMEOUT): stacks above")


def _guarded(phase):
    @pytest.hookimpl(wrapper=True)
    def hook(item):
        import faulthandler
        import signal
        if TEST_TIMEOUT_S <= 0 or not hasattr(signal, "SIGALRM"):
            return (yield)
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(TEST_TIMEOUT_S)
        faulthandler.dump_traceback_later(HARD_EXIT_S, exit=True, file=_TERMINAL[0] if _TERMINAL else sys.stderr)
        try:
            return (yield)
        finally:
            signal.alarm(0)
            faulthandler.cancel_dump_traceback_later()
            signal.signal(signal.SIGALRM, previous)
    hook.__name__ = f"pytest_runtest_{phase}"
    return hook


pytest_runtest_setup = _guarded("setup")
pytest_runtest_call = _guarded("call")
pytest_runtest_teardown = _guarded("teardown")


# --gpu_only: only the tests that need a CUDA GPU, i.e. those a CPU run skips for want of one (scripts/gpu_tests.py
# runs them in parallel processes on a GPU machine). A test needs a GPU when it carries a skipif marker whose condition
# is "no CUDA here" (True on a CPU machine, False on a GPU one) and whose reason names a GPU or CUDA: the suite's
# `needs_cuda` markers and their like. The interpreted tests (a skipif for the TRITON_INTERPRET child) are not among
# them: the CPU suite runs those.
GPU_REASON = re.compile(r"\b(GPU|CUDA)\b", re.IGNORECASE)


def pytest_addoption(parser):
    parser.addoption("--gpu_only", action="store_true",
                     help="run only the tests that need a CUDA GPU (those a CPU run skips for want of one)")


def needs_gpu(item, cuda_available: bool) -> bool:
    """Whether `item` carries a skipif marker that skips it exactly where CUDA is missing, for a GPU reason."""
    for marker in item.iter_markers("skipif"):
        condition = marker.args[0] if marker.args else marker.kwargs.get("condition")
        reason = str(marker.kwargs.get("reason", ""))
        if isinstance(condition, bool) and condition == (not cuda_available) and GPU_REASON.search(reason):
            return True
    return False


def keep_gpu_tests(config, items) -> None:
    """--gpu_only: deselect every test that does not need a GPU (reported as deselected)."""
    import torch
    cuda_available = torch.cuda.is_available()
    gpu = {item.nodeid: needs_gpu(item, cuda_available) for item in items}
    kept, left = [i for i in items if gpu[i.nodeid]], [i for i in items if not gpu[i.nodeid]]
    if left:
        config.hook.pytest_deselected(items=left)
    items[:] = kept


# The interpreted child (tests/test_interpreted.py) runs beside the other tests: started once collection has ended,
# its waiting test moved to the end of the run, killed if the run ends before that test waits for it.
INTERPRETED_TEST = "test_interpreted.py::test_kernels_interpreted"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if config.getoption("gpu_only"):
        keep_gpu_tests(config, items)
    waiting = [item for item in items if item.nodeid.endswith(INTERPRETED_TEST)]
    if waiting:
        items[:] = [item for item in items if item not in waiting] + waiting


_BESIDE = []  # the module whose child was started beside the tests (its stop_beside at the run's end)


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    for item in session.items:
        if item.nodeid.endswith(INTERPRETED_TEST):
            item.module.start_beside()
            _BESIDE.append(item.module)


def pytest_sessionfinish(session):
    while _BESIDE:
        _BESIDE.pop().stop_beside()

"""Shared test fixtures: offline paths to the GPT-2 ranks file and tiny Shakespeare.

Both live in ../shared beside the checkout (never committed). The environment variables
TUCKER_GPT2_TIKTOKEN and TUCKER_SHAKESPEARE_TXT override the locations.
"""
import os
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

from __future__ import annotations

import pytest

from polar_cli.inference.tokenizers import ChatTokenizer
from tests.support.models import QWEN3_TINY_DIR


@pytest.fixture(scope="session")
def qwen3() -> ChatTokenizer:
    """The real Qwen3 tokenizer and chat template (prepared offline by scripts/setup-tests)."""
    if not (QWEN3_TINY_DIR / "tokenizer.json").is_file():
        pytest.fail(f"{QWEN3_TINY_DIR} is missing: run scripts/setup-tests")
    return ChatTokenizer.load(str(QWEN3_TINY_DIR))

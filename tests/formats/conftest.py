"""Fixtures for the format tests: the next_token format over the test checkpoint's Qwen3.5 tokenizer
(tests/conftest.py `qwen_tokenizer`)."""

from __future__ import annotations

import pytest

from flidec.formats.next_token import NextTokenFormat
from flidec.models.tokenizer import ModelTokenizer


@pytest.fixture(scope="session")
def fmt(qwen_tokenizer: ModelTokenizer) -> NextTokenFormat:
    return NextTokenFormat(qwen_tokenizer)

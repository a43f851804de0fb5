"""Fixtures for the demo-model tools (tools/, a plain folder of scripts): its modules on sys.path and a
small demo tokenizer directory trained once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import demo_render
import demo_tokenizer


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory holding only the tokenizer files, trained on 1,500 demo requests."""
    out = tmp_path_factory.mktemp("demo-tokenizer")
    texts = [demo_render.corpus_text(ex) for ex in demo_render.set_examples(3, 1500)]
    demo_tokenizer.save_tokenizer(demo_tokenizer.train_tokenizer(texts, 4096), out)
    return out


@pytest.fixture(scope="session")
def render(demo_dir: Path) -> demo_render.Renderer:
    from flidec.models.tokenizer import load_tokenizer

    return demo_render.renderer(load_tokenizer(demo_dir))

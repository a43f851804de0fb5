"""Shared pytest fixtures: test checkpoints and the Qwen3.5 tokenizer, built once per test session.

`tiny_checkpoint`: a tiny Qwen3.5 directory (Qwen3_5ForCausalLM layout, bf16 weights, seed 0, the real
tokenizer and chat template) from flidec.testing.make_checkpoint. `tiny_conditional_checkpoint`: the same
text weights under Qwen3_5ForConditionalGeneration naming, plus vision and mtp tensors to skip.
`qwen_tokenizer`: flidec's ModelTokenizer for `tiny_checkpoint`; `fmt`: the next_token format over it;
`hf_qwen_tokenizer`: transformers'
AutoTokenizer for it (what vLLM would use; slow to load, so shared). `systemone_cpu_artifact`,
`planner_cpu_artifact`: those examples compiled for cpu with `tiny_checkpoint` (each once per session, ~2 s;
the runtime and the server tests load them). Treat all of them as read-only.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from flidec.models.tokenizer import ModelTokenizer, load_tokenizer
from flidec.runtime.next_token import NextTokenFormat
from flidec.testing.make_checkpoint import make_checkpoint

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# CI replays the same examples on every run (a red CI names a reproducible case); locally, hypothesis keeps
# exploring new ones.
settings.register_profile("ci", derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("tiny-causal"), "tiny", seed=0, dtype="bf16").path


@pytest.fixture(scope="session")
def tiny_conditional_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-conditional")
    return make_checkpoint(out, "tiny", seed=0, dtype="bf16", layout="conditional").path


@pytest.fixture(scope="session")
def qwen_tokenizer(tiny_checkpoint: Path) -> ModelTokenizer:
    return load_tokenizer(tiny_checkpoint)


@pytest.fixture(scope="session")
def fmt(qwen_tokenizer: ModelTokenizer) -> NextTokenFormat:
    """The next_token format over `qwen_tokenizer`."""
    return NextTokenFormat(qwen_tokenizer)


@pytest.fixture(scope="session")
def hf_qwen_tokenizer(tiny_checkpoint: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_checkpoint)


@pytest.fixture(scope="session")
def systemone_cpu_artifact(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Path:
    from flidec.compile import compile_artifact

    out = tmp_path_factory.mktemp("artifacts") / "systemone-cpu"
    compile_artifact(EXAMPLES / "systemone.flide", tiny_checkpoint, "cpu", out)
    return out


@pytest.fixture(scope="session")
def planner_cpu_artifact(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Path:
    """examples/planner.flide (a `resumable` state) for cpu with the tiny checkpoint."""
    from flidec.compile import compile_artifact

    out = tmp_path_factory.mktemp("artifacts") / "planner-cpu"
    compile_artifact(EXAMPLES / "planner.flide", tiny_checkpoint, "cpu", out)
    return out

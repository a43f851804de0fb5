"""Fixtures: saved tiny Qwen3.5 checkpoints (see qwen_tiny.py)."""

import pytest
from qwen_tiny import tiny_causal_lm


@pytest.fixture(scope="session", params=[True, False], ids=["tied", "untied"])
def causal_checkpoint(request, tmp_path_factory):
    """(directory, transformers model) of a saved tiny Qwen3_5ForCausalLM."""
    model = tiny_causal_lm(tie=request.param)
    path = tmp_path_factory.mktemp("tied" if request.param else "untied")
    model.save_pretrained(path)
    return path, model


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A saved tiny tied Qwen3_5ForCausalLM checkpoint directory."""
    path = tmp_path_factory.mktemp("tiny")
    tiny_causal_lm(tie=True, seed=3).save_pretrained(path)
    return path

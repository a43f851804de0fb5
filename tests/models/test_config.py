"""TextConfig from both config.json layouts and older rope keys; model resolution errors are ModelErrors."""

import json

import pytest
from qwen_tiny import TINY

from flidec.ir.errors import ModelError
from flidec.models.config import FULL, LINEAR, TextConfig
from flidec.models.weights import resolve_model


def test_conditional_generation_reads_text_config_and_top_level_tie():
    raw = {"architectures": ["Qwen3_5ForConditionalGeneration"], "tie_word_embeddings": True,
           "text_config": {**TINY, "tie_word_embeddings": False}}
    cfg = TextConfig.from_dict(raw)
    assert cfg.nested and cfg.tie_word_embeddings and cfg.hidden_size == 64


def test_defaults_and_older_rope_keys():
    text = {k: v for k, v in TINY.items() if k not in ("layer_types", "rope_parameters", "head_dim")}
    cfg = TextConfig.from_dict({**text, "num_hidden_layers": 8, "rope_theta": 1e6,
                                "partial_rotary_factor": 0.5})
    assert cfg.layer_types == (LINEAR, LINEAR, LINEAR, FULL) * 2
    assert (cfg.rope_theta, cfg.rotary_dim, cfg.head_dim) == (1e6, 8, 16)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "rope_type 'yarn'"),
        ({"architectures": ["LlamaForCausalLM"]}, "unsupported architecture 'LlamaForCausalLM'"),
        ({"architectures": None, "model_type": "llama"}, "unsupported model_type 'llama'"),
        ({"layer_types": ["linear_attention"]}, "layer_types must list 4"),
        ({"vocab_size": None}, None),
    ],
)
def test_bad_configs_raise_model_error(change, message):
    raw = {**TINY, **change}
    if change.get("vocab_size", 0) is None:
        del raw["vocab_size"]
        message = "missing 'vocab_size'"
    with pytest.raises(ModelError, match=message):
        TextConfig.from_dict(raw)


def test_resolve_model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    assert resolve_model(tmp_path) == tmp_path
    with pytest.raises(ModelError, match="not a model directory"):
        resolve_model(tmp_path / "absent")
    with pytest.raises(ModelError, match="could not be downloaded from the Hugging Face hub"):
        resolve_model("flidec-tests/no-such-model-4f1c2a")

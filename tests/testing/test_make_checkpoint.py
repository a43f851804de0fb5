"""Test checkpoints: transformers loads and runs them, seeds are reproducible, sizes have real shapes."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from flidec.testing import make_checkpoint as mc

PROMPT_IDS = torch.tensor(
    [
        [
            248045,
            846,
            198,
            3742,
            279,
            12515,
            6105,
            30,
            248046,
            198,
            248045,
            74455,
            198,
            248068,
            271,
            248069,
            271,
        ]
    ]
)


def _load(cls, path, **kwargs):
    model, info = cls.from_pretrained(path, dtype=torch.float32, output_loading_info=True, **kwargs)
    return model.eval(), info


def test_tiny_builds_the_files_of_a_checkpoint(tmp_path):
    ckpt = mc.make_checkpoint(tmp_path / "t", "tiny", seed=3)
    names = {p.name for p in ckpt.path.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    } <= names


def test_transformers_loads_tiny_and_runs_a_forward(tiny_checkpoint):
    from transformers import Qwen3_5ForCausalLM

    model, info = _load(Qwen3_5ForCausalLM, tiny_checkpoint)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    stored = load_file(tiny_checkpoint / "model.safetensors")
    params = dict(model.named_parameters())
    for name, tensor in stored.items():
        assert torch.equal(params[name].detach(), tensor.float()), name
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied
    cfg = model.config
    assert cfg.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert cfg.vocab_size == 248_320 and cfg.rope_parameters["partial_rotary_factor"] == 0.25
    with torch.no_grad():
        logits = model(PROMPT_IDS).logits
    assert logits.shape == (1, PROMPT_IDS.shape[1], 248_320)
    assert torch.isfinite(logits).all()
    # non-trivial: logits of order one, positions differ
    assert 0.3 < logits[0, -1].std().item() < 5.0
    assert not torch.equal(logits[0, -1], logits[0, -2])


def test_conditional_layout_holds_the_same_text_weights(tiny_checkpoint, tiny_conditional_checkpoint):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

    causal = load_file(tiny_checkpoint / "model.safetensors")
    cond = load_file(tiny_conditional_checkpoint / "model.safetensors")
    text = {
        n.replace("model.language_model.", "model.", 1): t
        for n, t in cond.items()
        if n.startswith("model.language_model.")
    }
    assert text.keys() == causal.keys()
    assert all(torch.equal(text[n], causal[n]) for n in causal)
    assert any(n.startswith("model.visual.") for n in cond) and any(n.startswith("mtp.") for n in cond)
    config = json.loads((tiny_conditional_checkpoint / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"] and "text_config" in config

    full, info = _load(Qwen3_5ForConditionalGeneration, tiny_conditional_checkpoint)
    # transformers drops mtp.* silently (its ignore list); nothing else may be left over or missing
    assert not info["missing_keys"] and all(k.startswith("mtp.") for k in info["unexpected_keys"])
    text_only, _ = _load(Qwen3_5ForCausalLM, tiny_checkpoint)
    with torch.no_grad():
        assert torch.equal(full(input_ids=PROMPT_IDS).logits, text_only(PROMPT_IDS).logits)


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = mc.make_checkpoint(tmp_path / "a", "tiny", seed=7, layout="conditional").path
    b = mc.make_checkpoint(tmp_path / "b", "tiny", seed=7, layout="conditional").path
    c = mc.make_checkpoint(tmp_path / "c", "tiny", seed=8, layout="conditional").path
    for name in (
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


def test_weights_have_their_roles(tiny_checkpoint):
    w = load_file(tiny_checkpoint / "model.safetensors")
    assert all(t.dtype == torch.bfloat16 for t in w.values())
    a = torch.exp(w["model.layers.0.linear_attn.A_log"].float())
    assert (a >= 0.99).all() and (a <= 16.1).all()
    assert w["model.layers.0.linear_attn.conv1d.weight"].shape == (128, 1, 4)
    zero_centred = w["model.layers.0.input_layernorm.weight"].float()
    assert zero_centred.abs().mean() < 0.3 and zero_centred.std() > 0.01
    gated = w["model.layers.0.linear_attn.norm.weight"].float()
    assert (gated - 1).abs().mean() < 0.3 and gated.std() > 0.01


def test_sharded_with_an_index_past_the_shard_size(tmp_path, monkeypatch):
    from transformers import Qwen3_5ForCausalLM

    monkeypatch.setattr(mc, "SHARD_BYTES", 20 * 1024**2)  # tiny's 32 MB of bf16 then needs two shards
    path = mc.make_checkpoint(tmp_path / "s", "tiny", seed=0, dtype="fp32").path
    index = json.loads((path / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) >= 2 and not (path / "model.safetensors").exists()
    stored = {}
    for f in files:
        stored |= load_file(path / f)
    assert all(t.dtype == torch.float32 for t in stored.values())
    assert index["metadata"]["total_size"] == sum(t.numel() * 4 for t in stored.values())
    assert set(index["weight_map"]) == set(stored)
    _, info = _load(Qwen3_5ForCausalLM, path)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def _meta_parameter_count(path) -> int:
    from transformers import AutoConfig, Qwen3_5ForCausalLM

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(config)
    return sum(p.numel() for p in model.parameters())  # tied parameters are one Parameter


def test_08b_config_without_weights(tmp_path, capsys):
    out = tmp_path / "q08"
    mc.main(["--size", "0.8B", "--out", str(out), "--no-weights"])
    printed = capsys.readouterr().out
    assert str(out) in printed and "parameters:" in printed
    assert not list(out.glob("*.safetensors"))
    config = json.loads((out / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["intermediate_size"]) == (
        1024,
        24,
        3584,
    )
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (8, 2, 256)
    assert (config["linear_num_key_heads"], config["linear_num_value_heads"]) == (16, 16)
    assert config["linear_key_head_dim"] == config["linear_value_head_dim"] == 128
    assert config["layer_types"] == (["linear_attention"] * 3 + ["full_attention"]) * 6
    assert config["tie_word_embeddings"] and config["vocab_size"] == 248_320
    assert config["rope_parameters"]["rope_theta"] == 10_000_000
    count = _meta_parameter_count(out)
    assert 0.7e9 < count < 0.9e9
    assert f"{count:,}" in printed


@pytest.mark.parametrize("size, low, high", [("2B", 1.5e9, 2.5e9), ("4B", 3.5e9, 5.0e9)])
def test_larger_sizes_count_about_their_name(tmp_path, size, low, high):
    ckpt = mc.make_checkpoint(tmp_path / size, size, weights=False)
    assert low < ckpt.parameters < high
    assert ckpt.parameters == _meta_parameter_count(ckpt.path)


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown size"):
        mc.make_checkpoint(tmp_path, "7B")
    with pytest.raises(ValueError, match="unknown layout"):
        mc.make_checkpoint(tmp_path, "tiny", layout="encoder")
    assert (
        math.prod(
            mc.tensor_shapes(mc.model_config(mc.SIZES["tiny"], "causal"), "causal")[
                "model.embed_tokens.weight"
            ]
        )
        == 248_320 * 64
    )

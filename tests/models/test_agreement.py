"""flidec's Qwen35 agrees with transformers' Qwen3_5ForCausalLM (torch paths, eager attention) in fp32 on
the same sequences, within 1e-5 relative; the ConditionalGeneration layout loads to the same weights; bad
checkpoints raise ModelError naming the tensor."""

import json
import shutil

import pytest
import torch
from qwen_tiny import TINY
from safetensors.torch import load_file, save_file

from flidec.ir.errors import ModelError
from flidec.models.config import TextConfig
from flidec.models.weights import load_weights
from flidec.runtime.meta import linear_stream
from flidec.runtime.reference.qwen3_5 import Qwen35


@pytest.mark.parametrize("length", [1, 63, 64, 65, 130])
def test_logits_agree_with_transformers(causal_checkpoint, length):
    path, reference = causal_checkpoint
    model = Qwen35.from_pretrained(path, torch.float32)
    tokens = torch.randint(0, TINY["vocab_size"], (length,), generator=torch.Generator().manual_seed(length))
    all_labels = tuple(range(TINY["vocab_size"]))
    stream = linear_stream(tokens.tolist(), {p: all_labels for p in range(length)})
    reference.config._attn_implementation = "eager"
    with torch.no_grad():
        expected = reference(tokens[None]).logits[0]
        out = model(stream.tokens, stream.meta)
    scale = expected.abs().max().item()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5 * scale)


def test_config_reads_the_text_config(causal_checkpoint):
    path, reference = causal_checkpoint
    cfg = TextConfig.from_dir(path)
    assert cfg.layer_types == tuple(TINY["layer_types"]) and cfg.rotary_dim == 8
    assert (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (64, 4, 2, 32)
    assert (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.conv_dim) == (2, 4, 128)
    assert cfg.tie_word_embeddings == reference.config.tie_word_embeddings and not cfg.nested


def _conditional_generation_dir(causal_dir, tmp_path):
    """The same text weights in Qwen3_5ForConditionalGeneration's layout, plus vision and MTP tensors."""
    raw = json.loads((causal_dir / "config.json").read_text())
    text = {k: v for k, v in raw.items() if k not in ("architectures", "tie_word_embeddings")}
    text["model_type"] = "qwen3_5_text"
    config = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
              "tie_word_embeddings": raw["tie_word_embeddings"], "text_config": text,
              "vision_config": {"depth": 1, "hidden_size": 16}}
    tensors = {k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k: v
               for k, v in load_file(causal_dir / "model.safetensors").items()}
    tensors["model.visual.blocks.0.attn.qkv.weight"] = torch.zeros(48, 16)
    tensors["mtp.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)  # a shape that would not fit: skipped
    out = tmp_path / "cg"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(config))
    half = len(tensors) // 2
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:half],
              "model-00002-of-00002.safetensors": names[half:]}
    for shard, keys in shards.items():
        save_file({k: tensors[k].contiguous() for k in keys}, out / shard)
    index = {"metadata": {}, "weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    return out


def test_conditional_generation_layout_loads_same_weights(causal_checkpoint, tmp_path):
    path, _ = causal_checkpoint
    nested = _conditional_generation_dir(path, tmp_path)
    assert TextConfig.from_dir(nested).nested
    a, b = load_weights(path, torch.float32), load_weights(nested, torch.float32)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def _rewrite(src, dst, edit):
    shutil.copytree(src, dst)
    tensors = load_file(dst / "model.safetensors")
    edit(tensors)
    save_file(tensors, dst / "model.safetensors")


def test_missing_tensor_is_named(causal_checkpoint, tmp_path):
    path, _ = causal_checkpoint
    _rewrite(path, tmp_path / "m", lambda t: t.pop("model.layers.3.self_attn.k_norm.weight"))
    with pytest.raises(ModelError, match=r"missing tensor\(s\) model\.layers\.3\.self_attn\.k_norm\.weight"):
        load_weights(tmp_path / "m", torch.float32)


def test_wrong_shape_is_named(causal_checkpoint, tmp_path):
    path, _ = causal_checkpoint
    key = "model.layers.1.linear_attn.in_proj_b.weight"
    _rewrite(path, tmp_path / "s", lambda t: t.__setitem__(key, torch.zeros(5, 64)))
    with pytest.raises(ModelError, match=rf"'{key}' has shape \[5, 64\], expected \[4, 64\]"):
        load_weights(tmp_path / "s", torch.float32)


def test_bf16_loads_and_runs(causal_checkpoint):
    path, _ = causal_checkpoint
    model = Qwen35.from_pretrained(path, torch.bfloat16)
    assert model.embed_tokens.weight.dtype == torch.bfloat16
    stream = linear_stream([1, 2, 3], {2: (5, 6)})
    out = model(stream.tokens, stream.meta)
    assert out.dtype == torch.float32 and out.shape == (1, 2) and out.isfinite().all()

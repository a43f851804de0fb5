"""Qwen3.5 text config: the numbers flidec's model definition needs, read from a Hugging Face config.json.

Consumes a model directory's config.json, either `Qwen3_5ForCausalLM` (the text config itself) or
`Qwen3_5ForConditionalGeneration` (its `text_config`); produces a frozen TextConfig. Defaults and the rope
layout follow transformers 5 (`rope_parameters` {rope_type, rope_theta, partial_rotary_factor}, with the older
top-level `rope_theta` / `partial_rotary_factor` accepted); anything flidec cannot run is a ModelError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flidec.ir.errors import ModelError

LINEAR, FULL = "linear_attention", "full_attention"
ARCHITECTURES = ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration")
MODEL_TYPES = ("qwen3_5", "qwen3_5_text")  # a config without `architectures` is read by its model_type


@dataclass(frozen=True, slots=True)
class TextConfig:
    hidden_size: int
    num_layers: int
    layer_types: tuple[str, ...]  # LINEAR (Gated DeltaNet) or FULL (gated attention) per layer
    num_heads: int
    num_kv_heads: int
    head_dim: int
    partial_rotary_factor: float
    rope_theta: float
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    conv_kernel: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    rms_norm_eps: float
    nested: bool  # the checkpoint is a ConditionalGeneration one (text weights under model.language_model.)

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.linear_key_dim + self.linear_value_dim

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TextConfig:
        arch = (raw.get("architectures") or [None])[0]
        nested = arch == "Qwen3_5ForConditionalGeneration" or (arch is None and "text_config" in raw)
        if arch is not None and arch not in ARCHITECTURES:
            raise ModelError(f"unsupported architecture {arch!r}: flidec runs {', '.join(ARCHITECTURES)}")
        kind = raw.get("model_type")
        if arch is None and kind is not None and kind not in MODEL_TYPES:
            raise ModelError(f"unsupported model_type {kind!r} (config.json names no architectures): flidec "
                             f"runs {', '.join(ARCHITECTURES)} (model_type {', '.join(MODEL_TYPES)})")
        text = raw.get("text_config") or {} if nested else raw
        tie = raw.get("tie_word_embeddings", text.get("tie_word_embeddings", False)) if nested else None
        return _from_text(text, nested, tie)

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> TextConfig:
        path = Path(model_dir) / "config.json"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ModelError(f"{path}: no config.json in the model directory") from None
        except json.JSONDecodeError as e:
            raise ModelError(f"{path}: not valid JSON ({e})") from None
        return cls.from_dict(raw)


def _from_text(text: dict[str, Any], nested: bool, tie: bool | None) -> TextConfig:
    def need(key: str) -> Any:
        if key not in text:
            raise ModelError(f"config.json: missing {key!r}{' in text_config' if nested else ''}")
        return text[key]

    if text.get("hidden_act", "silu") != "silu":
        raise ModelError(f"config.json: hidden_act {text['hidden_act']!r} is not supported (Qwen3.5 uses "
                         "silu)")
    if text.get("attention_bias", False):
        raise ModelError("config.json: attention_bias is not supported (Qwen3.5 has none)")
    rope = dict(text.get("rope_parameters") or text.get("rope_scaling") or {})
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ModelError(f"config.json: rope_type {rope_type!r} is not supported (only 'default')")
    layers = int(need("num_hidden_layers"))
    interval = int(text.get("full_attention_interval", 4))
    layer_types = tuple(text.get("layer_types")
                        or [FULL if (i + 1) % interval == 0 else LINEAR for i in range(layers)])
    if len(layer_types) != layers or not set(layer_types) <= {LINEAR, FULL}:
        raise ModelError(f"config.json: layer_types must list {layers} of {LINEAR!r} / {FULL!r}")
    hidden, heads = int(need("hidden_size")), int(need("num_attention_heads"))
    return TextConfig(
        hidden_size=hidden,
        num_layers=layers,
        layer_types=layer_types,
        num_heads=heads,
        num_kv_heads=int(need("num_key_value_heads")),
        head_dim=int(text.get("head_dim") or hidden // heads),
        partial_rotary_factor=float(
            rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
        ),
        rope_theta=float(rope.get("rope_theta", text.get("rope_theta", 10000.0))),
        linear_num_key_heads=int(need("linear_num_key_heads")),
        linear_num_value_heads=int(need("linear_num_value_heads")),
        linear_key_head_dim=int(need("linear_key_head_dim")),
        linear_value_head_dim=int(need("linear_value_head_dim")),
        conv_kernel=int(text.get("linear_conv_kernel_dim", 4)),
        intermediate_size=int(need("intermediate_size")),
        vocab_size=int(need("vocab_size")),
        tie_word_embeddings=bool(text.get("tie_word_embeddings", False) if tie is None else tie),
        rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
        nested=nested,
    )

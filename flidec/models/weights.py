"""Model directories and weights: a hub id or a local directory in, flidec's tensor names out.

`resolve_model` turns a local directory or a Hugging Face hub id into a directory (hub ids through
huggingface_hub's cache; no network is a ModelError that says so). `load_weights` reads *.safetensors
straight (an index file or every shard), maps both checkpoint layouts onto the names of flidec's Qwen35
module (`model.layers.*` for Qwen3_5ForCausalLM, `model.language_model.layers.*` for
Qwen3_5ForConditionalGeneration; `lm_head.weight` kept), skips the MTP head (`mtp.*`) and the vision tower
(`model.visual.*`), ties lm_head to embed_tokens when the config says so, and checks every expected tensor's
presence and shape against the TextConfig, naming the tensor on failure.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from flidec.ir.errors import ModelError
from flidec.models.config import LINEAR, TextConfig

SKIPPED_PREFIXES = ("mtp.", "model.visual.")


def resolve_model(id_or_dir: str | Path) -> Path:
    """A local model directory as is, or a hub id ("org/name") downloaded to (or found in) the HF cache."""
    path = Path(id_or_dir).expanduser()
    if path.is_dir():
        return path
    name = str(id_or_dir)
    if path.exists() or name.count("/") != 1 or name.startswith((".", "/", "~")):
        raise ModelError(f"{name}: not a model directory (and not a hub id of the form org/name)")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import EntryNotFoundError

    patterns = ["*.json", "*.safetensors", "*.txt", "*.jinja", "tokenizer*"]
    # hub errors are OSErrors (HTTP, offline, not in cache) or ValueErrors (a malformed id)
    failures = (OSError, ValueError, EntryNotFoundError)
    try:
        return Path(snapshot_download(name, allow_patterns=patterns, local_files_only=True))
    except failures:
        pass  # not in the local cache: the network is the only place left to look
    try:
        return Path(snapshot_download(name, allow_patterns=patterns))
    except failures as e:
        raise ModelError(
            f"{name}: not a local directory and could not be downloaded from the Hugging Face hub "
            f"(offline, or no such model?): {type(e).__name__}: {e}"
        ) from None


def expected_shapes(cfg: TextConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor flidec's Qwen35 module holds, by its name, with its shape."""
    h, shapes = cfg.hidden_size, {}
    shapes["embed_tokens.weight"] = (cfg.vocab_size, h)
    shapes["norm.weight"] = (h,)
    shapes["lm_head.weight"] = (cfg.vocab_size, h)
    for i, kind in enumerate(cfg.layer_types):
        p = f"layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "mlp.gate_proj.weight"] = (cfg.intermediate_size, h)
        shapes[p + "mlp.up_proj.weight"] = (cfg.intermediate_size, h)
        shapes[p + "mlp.down_proj.weight"] = (h, cfg.intermediate_size)
        if kind == LINEAR:
            a, hv = p + "linear_attn.", cfg.linear_num_value_heads
            shapes[a + "in_proj_qkv.weight"] = (cfg.conv_dim, h)
            shapes[a + "in_proj_z.weight"] = (cfg.linear_value_dim, h)
            shapes[a + "in_proj_b.weight"] = (hv, h)
            shapes[a + "in_proj_a.weight"] = (hv, h)
            shapes[a + "conv1d.weight"] = (cfg.conv_dim, 1, cfg.conv_kernel)
            shapes[a + "A_log"] = (hv,)
            shapes[a + "dt_bias"] = (hv,)
            shapes[a + "norm.weight"] = (cfg.linear_value_head_dim,)
            shapes[a + "out_proj.weight"] = (h, cfg.linear_value_dim)
        else:
            a, d = p + "self_attn.", cfg.head_dim
            shapes[a + "q_proj.weight"] = (2 * cfg.num_heads * d, h)
            shapes[a + "k_proj.weight"] = (cfg.num_kv_heads * d, h)
            shapes[a + "v_proj.weight"] = (cfg.num_kv_heads * d, h)
            shapes[a + "o_proj.weight"] = (h, cfg.num_heads * d)
            shapes[a + "q_norm.weight"] = (d,)
            shapes[a + "k_norm.weight"] = (d,)
    return shapes


def _local_name(key: str) -> str | None:
    """flidec's name for a checkpoint key of either layout; None for tensors flidec does not use."""
    if key.startswith(SKIPPED_PREFIXES):
        return None
    for prefix in ("model.language_model.", "model."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key if key == "lm_head.weight" else None


def _shards(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise ModelError(f"{index}: not a safetensors index ({e})") from None
        return [model_dir / f for f in sorted(set(weight_map.values()))]
    shards = sorted(model_dir.glob("*.safetensors"))
    if not shards:
        raise ModelError(f"{model_dir}: no *.safetensors weights")
    return shards


def load_weights(model_dir: str | Path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """All tensors of flidec's Qwen35 module, by name, in `dtype`, checked against the directory's config."""
    model_dir = Path(model_dir)
    cfg = TextConfig.from_dir(model_dir)
    shapes = expected_shapes(cfg)
    tensors: dict[str, torch.Tensor] = {}
    for shard in _shards(model_dir):
        if not shard.is_file():
            raise ModelError(f"{shard}: shard named in the index is missing")
        with safe_open(str(shard), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                name = _local_name(key)
                tied_head = name == "lm_head.weight" and cfg.tie_word_embeddings
                if name is None or name not in shapes or tied_head:
                    continue
                shape = tuple(f.get_slice(key).get_shape())
                if shape != shapes[name]:
                    raise ModelError(f"{shard.name}: tensor {key!r} has shape {list(shape)}, "
                                     f"expected {list(shapes[name])} from config.json")
                tensors[name] = f.get_tensor(key).to(dtype)
    if cfg.tie_word_embeddings and "embed_tokens.weight" in tensors:
        tensors["lm_head.weight"] = tensors["embed_tokens.weight"]
    missing = [n for n in shapes if n not in tensors]
    if missing:
        prefix = "model.language_model." if cfg.nested else "model."
        names = [n if n == "lm_head.weight" else prefix + n for n in missing]
        more = f" (and {len(names) - 5} more)" if len(names) > 5 else ""
        raise ModelError(f"{model_dir}: missing tensor(s) {', '.join(names[:5])}{more}")
    return tensors

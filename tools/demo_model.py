"""The demo model: a small Qwen3.5 (transformers' Qwen3_5ForCausalLM) on the torch Gated DeltaNet path.

`use_torch_gdn()` must run before transformers' Qwen3.5 module is imported: it hides flash-linear-attention
and causal-conv1d (whose Triton backward fails on Hopper with Triton 3.6) and the kernels hub, so
transformers binds its reference torch functions; `check_torch_gdn()` then proves the binding. `text_config`
sets the layers from a pattern (`layer_types`: "lllf" = 3 Gated DeltaNet : 1 attention, the shipped shape;
others, such as "f" for all attention, are diagnostics); `build_model` makes the model from that config;
`label_logits` is how flidec reads an answer (final-norm hidden state at the last prompt token against the
label rows of the tied output embedding, in float32); `loss` is the label cross-entropy (softmax over the
ask's labels only) plus a training-only option pointer and an optional next-token loss on the prompts.
"""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

_FAST_PACKAGES = ("fla", "causal_conv1d", "kernels")
LAYER_PATTERN = "lllf"  # the shipped 3 Gated DeltaNet : 1 attention, repeated over the layers
LAYER_KINDS = {"l": "linear_attention", "f": "full_attention"}
_GDN_FUNCTIONS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
                  "causal_conv1d_update")


@dataclass(frozen=True, slots=True)
class Size:
    hidden: int
    layers: int  # which are full attention: text_config's layer pattern (default every fourth, 3:1)
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    gdn_heads: int  # key and value heads
    gdn_head_dim: int


SIZES = {
    "demo": Size(hidden=256, layers=8, ffn=704, heads=4, kv_heads=2, head_dim=64, gdn_heads=4,
                 gdn_head_dim=64),
    "micro": Size(hidden=32, layers=4, ffn=64, heads=2, kv_heads=1, head_dim=16, gdn_heads=2,
                  gdn_head_dim=16),
}


def use_torch_gdn() -> None:
    """Make transformers bind its torch Gated DeltaNet and conv functions. Binding happens when its Qwen3.5
    module is imported, so this must come first; check_torch_gdn() catches a late call."""
    os.environ["USE_HUB_KERNELS"] = "0"
    for name in _FAST_PACKAGES:
        sys.modules[name] = None  # type: ignore[assignment]  # `import fla` now raises ImportError


def check_torch_gdn() -> None:
    """Raise unless every Gated DeltaNet / conv function transformers calls is its own torch function."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mod

    for name in _GDN_FUNCTIONS:
        fn = getattr(mod, name)
        impl = inspect.getclosurevars(fn).nonlocals.get("implementation", fn)
        if getattr(impl, "__module__", None) != mod.__name__:
            raise RuntimeError(f"transformers' {name} runs {impl.__module__}.{impl.__qualname__}, not its "
                               "torch path; call use_torch_gdn() before transformers is imported")


def layer_types(pattern: str, layers: int) -> list[str]:
    """A pattern of "l" (linear attention: Gated DeltaNet) and "f" (full attention) letters, repeated and cut
    to `layers` entries of the Qwen3_5 config's layer_types: "lllf" -> 3:1, "f" -> all attention."""
    if not pattern or set(pattern) - set(LAYER_KINDS):
        raise ValueError(f"a layer pattern is letters l (Gated DeltaNet) and f (full attention); got "
                         f"{pattern!r}")
    return [LAYER_KINDS[pattern[i % len(pattern)]] for i in range(layers)]


def text_config(size: Size, vocab_size: int, pad_id: int, eos_id: int, layer_pattern: str = LAYER_PATTERN):
    """The demo's Qwen3_5TextConfig: the test checkpoints' builder with the demo's own vocabulary, special
    ids, a 4,096-token context, rope theta 10,000 and `layer_pattern`'s layer_types (saved in config.json,
    which flidec reads)."""
    from flidec.testing import make_checkpoint

    shape = make_checkpoint.Size(hidden=size.hidden, layers=size.layers, ffn=size.ffn, heads=size.heads,
                                 kv_heads=size.kv_heads, head_dim=size.head_dim, gdn_key_heads=size.gdn_heads,
                                 gdn_value_heads=size.gdn_heads, gdn_head_dim=size.gdn_head_dim, tied=True)
    config = make_checkpoint.text_config(shape, "bf16", vocab_size=vocab_size, eos_id=eos_id, pad_id=pad_id,
                                         max_positions=4096, rope_theta=10_000.0)
    config.architectures = ["Qwen3_5ForCausalLM"]
    config.layer_types = layer_types(layer_pattern, size.layers)
    return config


def build_model(config, seed: int) -> torch.nn.Module:
    from transformers import Qwen3_5ForCausalLM

    check_torch_gdn()
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    return model


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied weights are one parameter, counted once


def label_logits(model, hidden: torch.Tensor, lengths: torch.Tensor, label_ids: torch.Tensor) -> torch.Tensor:
    """[B, MAX_LABELS] float32 logits of each example's labels at its last prompt token; -inf past them."""
    last = hidden[torch.arange(hidden.shape[0], device=hidden.device), lengths - 1].float()
    rows = model.get_output_embeddings().weight.float()[label_ids.clamp(min=0)]
    logits = torch.einsum("bd,bkd->bk", last, rows)
    return logits.masked_fill(label_ids < 0, float("-inf"))


def forward(model, ids: torch.Tensor, mid_layer: int | None = None
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Final-norm hidden states [B, T, H] of right-padded prompts (causal: padding never reaches a prompt),
    and the residual stream after `mid_layer` layers when asked for."""
    out = model.model(input_ids=ids, use_cache=False, output_hidden_states=mid_layer is not None)
    return out.last_hidden_state, (out.hidden_states[mid_layer] if mid_layer is not None else None)


def aux_layer(config) -> int:
    """Where the option pointer reads: after 3/4 of the layers, so later layers can still use what it
    finds."""
    return (3 * config.num_hidden_layers) // 4


def loss(model, pointer: torch.nn.Module | None, ids: torch.Tensor, lengths: torch.Tensor,
         label_ids: torch.Tensor, option_ends: torch.Tensor, targets: torch.Tensor,
         lm_weight: float, pointer_weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(total loss, each example's label loss [B], detached: the caller averages it per ask type).

    Label loss: cross-entropy over the ask's labels at the last prompt token (what flidec reads). Pointer
    loss (training only; `pointer` is a Linear(hidden, 1) that is not shipped): for choices, a softmax over
    the option lines' last tokens, after aux_layer(config) layers, must pick the target option. It teaches
    the network to mark the right option where that option is written, the step that letter binding
    otherwise takes thousands of updates to find. LM loss: next-token cross-entropy on the prompts.
    """
    mid = aux_layer(model.config) if pointer is not None and pointer_weight else None
    hidden, middle = forward(model, ids, mid)
    label_losses = F.cross_entropy(label_logits(model, hidden, lengths, label_ids), targets, reduction="none")
    total = label_losses.mean()
    choice = option_ends[:, 0] >= 0
    if middle is not None and bool(choice.any()):
        ends, rows = option_ends[choice], middle[choice]
        picked = rows[torch.arange(len(rows), device=ids.device)[:, None], ends.clamp(min=0)]
        scores = pointer(picked).squeeze(-1).float().masked_fill(ends < 0, float("-inf"))
        total = total + pointer_weight * F.cross_entropy(scores, targets[choice])
    if lm_weight:
        logits = model.lm_head(hidden[:, :-1])
        positions = torch.arange(ids.shape[1] - 1, device=ids.device)
        lm_targets = ids[:, 1:].masked_fill(positions[None] >= (lengths[:, None] - 1), -100)
        total = total + lm_weight * F.cross_entropy(logits.flatten(0, 1).float(), lm_targets.flatten(),
                                                    ignore_index=-100)
    return total, label_losses.detach()

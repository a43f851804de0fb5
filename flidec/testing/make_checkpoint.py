"""Test checkpoints: Qwen3.5 directories in HF format with seeded random weights and the real tokenizer.

`python -m flidec.testing.make_checkpoint --size tiny|0.8B|2B|4B --out DIR` (or `make_checkpoint`) writes
config.json, the weights in safetensors, generation_config.json and the tokenizer files of
flidec.testing.tokenizer; `--decision LAYOUT` adds a release-like decision_config.json
(flidec.testing.decision_checkpoints). Tensor names and shapes come from transformers' own model built on
the meta device and values are seeded per tensor by (seed, name), so the same arguments give the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from flidec.ir.errors import FlideError
from flidec.runtime.recording import MODEL_DTYPES
from flidec.testing.decision_checkpoints import LAYOUTS, write_decision_layout
from flidec.testing.tokenizer import save_hf_tokenizer

VOCAB_SIZE = 248_320
EOS_ID = 248_046  # <|im_end|>
PAD_ID = 248_044  # <|endoftext|>
SHARD_BYTES = 2 * 1024**3


@dataclass(frozen=True, slots=True)
class Size:
    hidden: int
    layers: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    gdn_key_heads: int
    gdn_value_heads: int
    gdn_head_dim: int
    tied: bool = True


# 0.8B: from the issue text. 4B: hidden, layers, attention heads and vocabulary from the model card of
# kshitijthakkar/qwen3.5-moe-4.7B-d4B (a derivative that copies Qwen/Qwen3.5-4B's backbone); its FFN, GDN
# heads and tying are UNVERIFIED guesses. 2B: UNVERIFIED, no source found offline. All sizes: one full
# attention layer after every three GDN layers, partial rotary 0.25, rope theta 10,000,000, vocab 248,320.
SIZES = {
    # tiny: fast CPU tests; value heads = 2x key heads as in the larger models, so GDN head sharing is
    # exercised; 16M of its 16.3M parameters are the (tied) embedding the real vocabulary needs.
    "tiny": Size(
        hidden=64,
        layers=4,
        ffn=128,
        heads=4,
        kv_heads=2,
        head_dim=32,
        gdn_key_heads=2,
        gdn_value_heads=4,
        gdn_head_dim=16,
    ),
    "0.8B": Size(
        hidden=1024,
        layers=24,
        ffn=3584,
        heads=8,
        kv_heads=2,
        head_dim=256,
        gdn_key_heads=16,
        gdn_value_heads=16,
        gdn_head_dim=128,
    ),
    "2B": Size(
        hidden=2048,
        layers=24,
        ffn=6144,
        heads=8,
        kv_heads=2,
        head_dim=256,
        gdn_key_heads=16,
        gdn_value_heads=16,
        gdn_head_dim=128,
    ),
    "4B": Size(
        hidden=2560,
        layers=32,
        ffn=9216,
        heads=16,
        kv_heads=4,
        head_dim=256,
        gdn_key_heads=16,
        gdn_value_heads=32,
        gdn_head_dim=128,
    ),
}


@dataclass(frozen=True, slots=True)
class Checkpoint:
    path: Path
    parameters: int  # every tensor written (or that would be), tied embedding counted once
    tensors: int


def text_config(size: Size, dtype: str = "bf16", *, vocab_size: int = VOCAB_SIZE, eos_id: int = EOS_ID,
                pad_id: int = PAD_ID, max_positions: int = 262_144, rope_theta: float = 10_000_000.0):
    """transformers' Qwen3_5TextConfig for a Size (the real model's defaults; the demo model overrides its
    vocabulary, special ids, context and rope theta)."""
    from transformers import Qwen3_5TextConfig

    rotary_pairs = size.head_dim // 4 // 2  # partial rotary 0.25
    third = rotary_pairs // 3
    return Qwen3_5TextConfig(
        vocab_size=vocab_size,
        hidden_size=size.hidden,
        intermediate_size=size.ffn,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        head_dim=size.head_dim,
        linear_key_head_dim=size.gdn_head_dim,
        linear_value_head_dim=size.gdn_head_dim,
        linear_num_key_heads=size.gdn_key_heads,
        linear_num_value_heads=size.gdn_value_heads,
        linear_conv_kernel_dim=4,
        tie_word_embeddings=size.tied,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-6,
        # Real checkpoints carry interleaved M-RoPE sections; with text-only positions (t = h = w) they
        # reduce to plain RoPE on the rotary dims, which is what flidec implements.
        rope_parameters={
            "rope_type": "default",
            "rope_theta": rope_theta,
            "partial_rotary_factor": 0.25,
            "mrope_section": [rotary_pairs - 2 * third, third, third],
            "mrope_interleaved": True,
        },
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype=str(MODEL_DTYPES[dtype]).removeprefix("torch."),  # the config's name: bfloat16, float32
    )


def model_config(size: Size, layout: str, dtype: str = "bf16"):
    text = text_config(size, dtype)
    if layout == "causal":
        text.architectures = ["Qwen3_5ForCausalLM"]
        return text
    from transformers import Qwen3_5Config

    vision = {
        "depth": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "num_position_embeddings": 64,
        "out_hidden_size": size.hidden,
    }
    config = Qwen3_5Config(
        text_config=text.to_dict(), vision_config=vision, tie_word_embeddings=size.tied, dtype=text.dtype
    )
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    return config


def tensor_shapes(config, layout: str) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor the checkpoint holds, in transformers' naming."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

    cls = Qwen3_5ForCausalLM if layout == "causal" else Qwen3_5ForConditionalGeneration
    with torch.device("meta"):
        model = cls(config)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    text = config if layout == "causal" else config.text_config
    if text.tie_word_embeddings:
        del shapes["lm_head.weight"]  # tied checkpoints store the embedding once
    if layout == "conditional":
        # transformers does not model the MTP head (it drops `mtp.*` on load), so these few names and shapes
        # follow real Qwen3.5 checkpoints by hand.
        h = text.hidden_size
        shapes |= {
            "mtp.fc.weight": (h, 2 * h),
            "mtp.norm.weight": (h,),
            "mtp.pre_fc_norm_embedding.weight": (h,),
            "mtp.pre_fc_norm_hidden.weight": (h,),
        }
    return shapes


def init_tensor(name: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Seeded float32 values for one tensor, chosen by its role so activations stay sane but not trivial.

    The generator is keyed by the text-model name, so both layouts hold the same text weights for a seed.
    """
    canonical = name.replace("model.language_model.", "model.", 1)
    digest = hashlib.sha256(f"{seed}:{canonical}".encode()).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)

    def normal(std: float) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    if name.endswith("A_log"):
        # decay rates A in [1, 16]: g = -A * softplus(...) spans slow and fast forgetting
        return torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log_()
    if name.endswith("dt_bias"):
        return 1.0 + normal(0.5)
    if name.endswith("conv1d.weight"):
        return normal(0.5)
    if len(shape) == 1 and name.endswith(".weight") and "norm" in name:
        # Qwen3.5's RMSNorm scales by (1 + weight), so its weights are zero-centred; the gated GDN norm and
        # the vision LayerNorms scale by the weight itself.
        scales_by_weight = name.endswith("linear_attn.norm.weight") or name.startswith("model.visual")
        return (1.0 if scales_by_weight else 0.0) + normal(0.1)
    if name.endswith("embed_tokens.weight"):
        return normal(1.0 / math.sqrt(shape[1]))  # tied head: logits of order 1
    if len(shape) == 1:
        return normal(0.02)  # biases
    fan_in = math.prod(shape[1:])
    return normal(1.0 / math.sqrt(fan_in))


def make_checkpoint(
    out: str | Path,
    size: str = "tiny",
    *,
    weights: bool = True,
    seed: int = 0,
    dtype: str = "bf16",
    layout: str = "causal",
    decision: str | None = None,
) -> Checkpoint:
    """Write a checkpoint directory; the keywords are the command line's --no-weights (weights=False), --seed,
    --dtype bf16|fp32 and --layout causal|conditional. config.json is transformers' Qwen3_5TextConfig, or
    Qwen3_5Config with a text_config for the conditional layout; model.safetensors is sharded with an index
    past SHARD_BYTES. The conditional layout nests the text tensors under model.language_model.* and adds a
    small (not the real) vision tower `model.visual.*` and a few multi-token-prediction tensors `mtp.*`,
    which loaders must skip. `decision` (--decision) names a layout of flidec.testing.decision_checkpoints
    written into the directory after the checkpoint."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; one of {', '.join(SIZES)}")
    if dtype not in MODEL_DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; one of {', '.join(MODEL_DTYPES)}")
    if layout not in ("causal", "conditional"):
        raise ValueError(f"unknown layout {layout!r}; causal or conditional")
    if decision is not None and decision not in LAYOUTS:
        raise ValueError(f"unknown decision layout {decision!r}; one of {', '.join(LAYOUTS)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = model_config(SIZES[size], layout, dtype)
    config.save_pretrained(out)
    _generation_config().save_pretrained(out)
    save_hf_tokenizer(out)
    shapes = tensor_shapes(config, layout)
    if weights:
        _write_weights(out, shapes, seed, MODEL_DTYPES[dtype])
    if decision is not None:
        write_decision_layout(out, decision, seed)
    return Checkpoint(out, sum(math.prod(s) for s in shapes.values()), len(shapes))


def _generation_config():
    from transformers import GenerationConfig

    return GenerationConfig(
        eos_token_id=[EOS_ID, PAD_ID],
        pad_token_id=PAD_ID,
        do_sample=True,
        temperature=0.6,
        top_k=20,
        top_p=0.95,
    )


def _write_weights(out: Path, shapes: dict[str, tuple[int, ...]], seed: int, dtype: torch.dtype) -> None:
    itemsize = torch.empty((), dtype=dtype).element_size()
    shards: list[list[str]] = [[]]
    used = 0
    for name in sorted(shapes):
        nbytes = math.prod(shapes[name]) * itemsize
        if shards[-1] and used + nbytes > SHARD_BYTES:
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += nbytes
    if len(shards) == 1:
        files = ["model.safetensors"]
    else:
        files = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    weight_map = {}
    for file, names in zip(files, shards, strict=True):
        tensors = {n: init_tensor(n, shapes[n], seed).to(dtype) for n in names}
        save_file(tensors, str(out / file), metadata={"format": "pt"})
        (out / file).chmod(0o644)  # safetensors writes owner-only files; checkpoints are shared read-only
        weight_map |= {n: file for n in names}
    if len(shards) > 1:
        total = sum(math.prod(s) for s in shapes.values()) * itemsize
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m flidec.testing.make_checkpoint", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--size", choices=list(SIZES), default="tiny")
    parser.add_argument("--out", required=True)
    parser.add_argument("--no-weights", action="store_true", help="write config and tokenizer only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=list(MODEL_DTYPES), default="bf16")
    parser.add_argument("--layout", choices=["causal", "conditional"], default="causal")
    parser.add_argument("--decision", choices=list(LAYOUTS), metavar="LAYOUT",
                        help=f"also write a decision layout: {', '.join(LAYOUTS)}")
    args = parser.parse_args(argv)
    try:
        ckpt = make_checkpoint(
            args.out, args.size, weights=not args.no_weights, seed=args.seed, dtype=args.dtype,
            layout=args.layout, decision=args.decision,
        )
    except FlideError as e:
        raise SystemExit(f"make_checkpoint: error: {e}") from None
    print(ckpt.path)
    print(f"parameters: {ckpt.parameters:,} in {ckpt.tensors} tensors")


if __name__ == "__main__":
    main()

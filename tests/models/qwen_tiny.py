"""Tiny random Qwen3.5 checkpoints written by transformers itself (the numerical reference and the format)."""

import torch

TINY = {
    "hidden_size": 64, "num_hidden_layers": 4, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "intermediate_size": 128, "vocab_size": 1000,
    "rms_norm_eps": 1e-6, "initializer_range": 0.1,
}


def tiny_causal_lm(tie: bool, seed: int = 0):
    """A seeded Qwen3_5ForCausalLM whose norms, A_log and dt_bias sit away from their init, so bugs show."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**TINY, tie_word_embeddings=tie)).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.5, 8, generator=g).log())
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif "norm" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model

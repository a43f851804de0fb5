"""The reference model: a compact Qwen3.5 text model over a packed stream, traceable with torch.fx.

Consumes a TextConfig and weights named as in flidec.models.weights; `forward(tokens [T], meta)` returns the
fp32 label logits of meta's reads [R, Lmax], `hidden_states` every row's final-normed fp32 hidden state.
Every row-wise product and norm is a reference op, and the op table's MODEL ops are torch.fx leaf calls, so
`symbolic_trace` yields the graph the passes rewrite. It lives in the runtime, beside the ops it is made of,
because the runtime's reference engine runs it: the runtime imports flidec.models (configs, weights,
tokenizers) and flidec.models imports nothing of the runtime. Architecture as transformers' modeling_qwen3_5
(its numerical reference): zero-centred RMSNorm, gated attention with partial RoPE and GQA, Gated DeltaNet
(causal conv + SiLU, L2-normed q/k, gated RMSNorm with silu(z)), SwiGLU MLP, tied or untied head.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from flidec.models.config import LINEAR, TextConfig
from flidec.models.weights import expected_shapes, load_weights
from flidec.runtime.meta import StreamMeta
from flidec.runtime.reference.op_table import MODEL_OPS
from flidec.runtime.reference.ops import (
    embed,
    fork_attention,
    fork_conv,
    fork_gdn,
    gated_rms_norm,
    gdn_beta,
    gdn_decay,
    label_logits,
    linear,
    rms_norm,
    rotary,
)

# Leaf calls: kept whole in the traced graph (they loop over tiles, segments and chunks, or read meta).
LEAF_OPS = tuple(op.name for op in MODEL_OPS)
for _name in LEAF_OPS:
    torch.fx.wrap(_name)


class Weight(nn.Module):
    """One tensor under transformers' `<module>.weight` name (projections are bias-free in Qwen3.5)."""

    def __init__(self, *shape: int, dtype: torch.dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(*shape, dtype=dtype), requires_grad=False)


class Attention(nn.Module):
    def __init__(self, cfg: TextConfig, dtype: torch.dtype, activations: torch.dtype):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.act = activations
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.eps = cfg.rms_norm_eps
        self.q_proj = Weight(2 * cfg.num_heads * d, h, dtype=dtype)  # per head: query, then output gate
        self.k_proj = Weight(cfg.num_kv_heads * d, h, dtype=dtype)
        self.v_proj = Weight(cfg.num_kv_heads * d, h, dtype=dtype)
        self.o_proj = Weight(h, cfg.num_heads * d, dtype=dtype)
        self.q_norm = Weight(d, dtype=dtype)
        self.k_norm = Weight(d, dtype=dtype)
        rot = cfg.rotary_dim  # inv_freq stays fp32 whatever the weights' dtype, as in transformers
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, meta: StreamMeta) -> torch.Tensor:
        d = self.head_dim
        qg = linear(x, self.q_proj.weight).view(-1, self.heads, 2 * d)
        q, gate = qg[..., :d], qg[..., d:].reshape(-1, self.heads * d)
        q = rms_norm(q, self.q_norm.weight, self.eps)
        k = rms_norm(linear(x, self.k_proj.weight).view(-1, self.kv_heads, d), self.k_norm.weight, self.eps)
        v = linear(x, self.v_proj.weight).view(-1, self.kv_heads, d)
        q = rotary(q, meta.positions, self.inv_freq)
        k = rotary(k, meta.positions, self.inv_freq)
        o = fork_attention(q, k, v, meta)
        o = o.reshape(-1, self.heads * d) * torch.sigmoid(gate)
        return linear(o, self.o_proj.weight, self.act)


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg: TextConfig, dtype: torch.dtype, activations: torch.dtype):
        super().__init__()
        self.dtype, self.act = dtype, activations
        h, hv = cfg.hidden_size, cfg.linear_num_value_heads
        self.key_dim, self.value_dim = cfg.linear_key_dim, cfg.linear_value_dim
        self.k_heads, self.k_dim = cfg.linear_num_key_heads, cfg.linear_key_head_dim
        self.v_heads, self.v_dim = hv, cfg.linear_value_head_dim
        self.eps = cfg.rms_norm_eps
        self.in_proj_qkv = Weight(cfg.conv_dim, h, dtype=dtype)
        self.in_proj_z = Weight(self.value_dim, h, dtype=dtype)
        self.in_proj_b = Weight(hv, h, dtype=dtype)
        self.in_proj_a = Weight(hv, h, dtype=dtype)
        # depthwise: one filter per channel
        self.conv1d = Weight(cfg.conv_dim, 1, cfg.conv_kernel, dtype=dtype)
        self.A_log = nn.Parameter(torch.zeros(hv, dtype=dtype), requires_grad=False)
        self.dt_bias = nn.Parameter(torch.zeros(hv, dtype=dtype), requires_grad=False)
        self.norm = Weight(self.v_dim, dtype=dtype)
        self.out_proj = Weight(h, self.value_dim, dtype=dtype)

    def forward(self, x: torch.Tensor, meta: StreamMeta) -> torch.Tensor:
        # the input projections (one launch) in the activations' dtype, so q, k, v, z and the gates meet
        # the conv and the Gated DeltaNet unrounded
        qkv = linear(x, self.in_proj_qkv.weight, self.act)
        qkv = fork_conv(qkv, self.conv1d.weight[:, 0], meta, self.act)
        q = qkv[:, : self.key_dim].reshape(-1, self.k_heads, self.k_dim)
        k = qkv[:, self.key_dim : 2 * self.key_dim].reshape(-1, self.k_heads, self.k_dim)
        v = qkv[:, 2 * self.key_dim :].reshape(-1, self.v_heads, self.v_dim)
        g = gdn_decay(linear(x, self.in_proj_a.weight, self.act), self.A_log, self.dt_bias)
        beta = gdn_beta(linear(x, self.in_proj_b.weight, self.act))
        o = fork_gdn(q, k, v, g, beta, meta)
        z = linear(x, self.in_proj_z.weight, self.act).view(-1, self.v_heads, self.v_dim)
        o = gated_rms_norm(o, z, self.norm.weight, self.eps, self.dtype)
        return linear(o.reshape(-1, self.value_dim), self.out_proj.weight, self.act)


class MLP(nn.Module):
    def __init__(self, cfg: TextConfig, dtype: torch.dtype, activations: torch.dtype):
        super().__init__()
        self.dtype, self.act = dtype, activations
        self.gate_proj = Weight(cfg.intermediate_size, cfg.hidden_size, dtype=dtype)
        self.up_proj = Weight(cfg.intermediate_size, cfg.hidden_size, dtype=dtype)
        self.down_proj = Weight(cfg.hidden_size, cfg.intermediate_size, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # projections in the activations' dtype, their product rounded once (the down projection's operand)
        act = F.silu(linear(x, self.gate_proj.weight, self.act)) * linear(x, self.up_proj.weight, self.act)
        return linear(act.to(self.dtype), self.down_proj.weight, self.act)


class Layer(nn.Module):
    def __init__(self, cfg: TextConfig, kind: str, dtype: torch.dtype, activations: torch.dtype):
        super().__init__()
        self.kind, self.eps, self.dtype = kind, cfg.rms_norm_eps, dtype
        self.input_layernorm = Weight(cfg.hidden_size, dtype=dtype)
        self.post_attention_layernorm = Weight(cfg.hidden_size, dtype=dtype)
        if kind == LINEAR:
            self.linear_attn = GatedDeltaNet(cfg, dtype, activations)
        else:
            self.self_attn = Attention(cfg, dtype, activations)
        self.mlp = MLP(cfg, dtype, activations)

    def forward(self, x: torch.Tensor, meta: StreamMeta) -> torch.Tensor:
        h = rms_norm(x, self.input_layernorm.weight, self.eps, self.dtype)
        mixer = self.linear_attn if self.kind == LINEAR else self.self_attn
        x = x + mixer(h, meta)
        return x + self.mlp(rms_norm(x, self.post_attention_layernorm.weight, self.eps, self.dtype))


READOUT = "readout.weight"  # the readout head's parameter, beside the checkpoint's own names


class Qwen35(nn.Module):
    """Parameters are zeros until `load_weights`; `from_pretrained` builds and loads in one go.

    `dtype` is the weights' and the GEMMs' operands'; `activations` (default fp32) the residual stream's, the
    projections' results and the Gated DeltaNet's inputs and outputs (docs/DESIGN.md E4; flidec compile
    --activations)."""

    def __init__(self, cfg: TextConfig, dtype: torch.dtype = torch.float32,
                 activations: torch.dtype = torch.float32, head_rows: int = 0):
        super().__init__()
        self.cfg, self.act = cfg, activations
        self.embed_tokens = Weight(cfg.vocab_size, cfg.hidden_size, dtype=dtype)
        self.layers = nn.ModuleList(Layer(cfg, kind, dtype, activations) for kind in cfg.layer_types)
        self.norm = Weight(cfg.hidden_size, dtype=dtype)
        self.lm_head = Weight(cfg.vocab_size, cfg.hidden_size, dtype=dtype)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        # a decision format's readout head (runtime/decision): its rows replace the output head's, in fp32
        self.readout = Weight(head_rows, cfg.hidden_size, dtype=torch.float32) if head_rows else None

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, dtype: torch.dtype = torch.bfloat16,
                        activations: torch.dtype = torch.float32,
                        readout: torch.Tensor | None = None) -> Qwen35:
        model = cls(TextConfig.from_dir(model_dir), dtype, activations,
                    0 if readout is None else readout.shape[0])
        tensors = load_weights(model_dir, dtype)
        model.load_weights(tensors if readout is None else {**tensors, READOUT: readout})
        return model

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy named tensors (flidec.models.weights names and shapes, and READOUT with a readout head) into
        the parameters."""
        params = dict(self.named_parameters(remove_duplicate=False))
        for name in [*expected_shapes(self.cfg), *([READOUT] if self.readout is not None else [])]:
            with torch.no_grad():
                params[name].copy_(tensors[name])

    def hidden_states(self, tokens: torch.Tensor, meta: StreamMeta) -> torch.Tensor:
        """Final-normed hidden state of every row, fp32 [T, H] (the final norm runs in fp32: E4)."""
        x = embed(tokens, self.embed_tokens.weight, self.act)
        for layer in self.layers:
            x = layer(x, meta)
        return rms_norm(x.float(), self.norm.weight, self.cfg.rms_norm_eps)

    def forward(self, tokens: torch.Tensor, meta: StreamMeta) -> torch.Tensor:
        """fp32 logits of every read's labels [R, Lmax], padding labels -inf."""
        head = self.lm_head if self.readout is None else self.readout
        return label_logits(self.hidden_states(tokens, meta), head.weight, meta)

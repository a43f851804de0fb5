"""A saved point: every tensor a continuation of a state's first `length` positions reads.

Per attention layer, the keys and values of positions [0, length) as the fork attention reads them (after
the key norm and RoPE); per Gated DeltaNet layer, the fp32 recurrent state at `length` and the conv window
(the conv inputs of the CONV_TAPS - 1 positions before `length`). `length` is a multiple of CHUNK, so a
continuation starts on a chunk boundary with no straddling chunk to recompute. PointLayout fixes the shapes
and dtypes a model's points have: what a checkpoint read from disk is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flidec.ir.errors import FlideError
from flidec.models.config import LINEAR, TextConfig
from flidec.runtime.meta import CHUNK, CONV_TAPS


class PointRefused(FlideError):
    """A saved point that cannot be used (a checkpoint's reason: corrupt, truncated, foreign, mismatched)."""


@dataclass(frozen=True, slots=True)
class PointLayout:
    """The tensors a model's saved points hold: layer counts, per-position or per-layer shapes, dtypes."""

    attention_layers: int
    gdn_layers: int
    kv: tuple[int, int]  # (key/value heads, head dim): a position's keys in one attention layer
    state: tuple[int, int, int]  # (value heads, key head dim, value head dim), fp32
    window: tuple[int, int]  # (CONV_TAPS - 1, conv channels)
    dtype: torch.dtype  # keys, values and windows: the engine's activations

    @classmethod
    def of(cls, cfg: TextConfig, dtype: torch.dtype) -> PointLayout:
        gdn = sum(kind == LINEAR for kind in cfg.layer_types)
        return cls(len(cfg.layer_types) - gdn, gdn, (cfg.num_kv_heads, cfg.head_dim),
                   (cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim),
                   (CONV_TAPS - 1, cfg.conv_dim), dtype)

    def shapes(self, length: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Every tensor of a point of `length` positions by its checkpoint name: (shape, dtype)."""
        out: dict[str, tuple[tuple[int, ...], torch.dtype]] = {"tokens": ((length,), torch.int64)}
        for i in range(self.attention_layers):
            out[f"attention.{i}.keys"] = ((length, *self.kv), self.dtype)
            out[f"attention.{i}.values"] = ((length, *self.kv), self.dtype)
        for i in range(self.gdn_layers):
            out[f"gdn.{i}.state"] = (self.state, torch.float32)
            out[f"gdn.{i}.window"] = (self.window, self.dtype)
        return out

    def nbytes(self, length: int) -> int:
        """Bytes of a point of `length` positions (its token ids included)."""
        total = 0
        for shape, dtype in self.shapes(length).values():
            n = 1
            for d in shape:
                n *= d
            total += n * dtype.itemsize
        return total


@dataclass(frozen=True, eq=False)
class SavedPoint:
    key: str  # the address of its token prefix (keys.prefix_keys)
    length: int  # positions held, a multiple of CHUNK
    tokens: torch.Tensor  # [length] int64, on the host
    keys: tuple[torch.Tensor, ...]  # per attention layer [length, kv heads, head dim]
    values: tuple[torch.Tensor, ...]
    states: tuple[torch.Tensor, ...]  # per GDN layer [value heads, key dim, value dim] fp32
    windows: tuple[torch.Tensor, ...]  # per GDN layer [CONV_TAPS - 1, conv channels]

    def __post_init__(self) -> None:
        assert self.length > 0 and self.length % CHUNK == 0 and self.tokens.shape == (self.length,)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    @property
    def device(self) -> torch.device:
        return (self.states or self.keys)[0].device

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor by its checkpoint name (PointLayout.shapes)."""
        out = {"tokens": self.tokens}
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            out[f"attention.{i}.keys"], out[f"attention.{i}.values"] = k, v
        for i, (s, w) in enumerate(zip(self.states, self.windows, strict=True)):
            out[f"gdn.{i}.state"], out[f"gdn.{i}.window"] = s, w
        return out

    @classmethod
    def from_tensors(cls, key: str, length: int, tensors: dict[str, torch.Tensor], layout: PointLayout
                     ) -> SavedPoint:
        """The point these named tensors make; PointRefused unless they are exactly the layout's."""
        want = layout.shapes(length)
        if set(tensors) != set(want):
            extra, missing = sorted(set(tensors) - set(want)), sorted(set(want) - set(tensors))
            raise PointRefused(f"other model: tensors do not match this model's saved points (missing "
                               f"{missing[:3]}, unexpected {extra[:3]})")
        for name, (shape, dtype) in want.items():
            t = tensors[name]
            if tuple(t.shape) != shape or t.dtype != dtype:
                raise PointRefused(f"other model: tensor {name} is {t.dtype} {list(t.shape)}; this model's "
                                   f"points hold {dtype} {list(shape)}")
        return cls(key, length, tensors["tokens"],
                   tuple(tensors[f"attention.{i}.keys"] for i in range(layout.attention_layers)),
                   tuple(tensors[f"attention.{i}.values"] for i in range(layout.attention_layers)),
                   tuple(tensors[f"gdn.{i}.state"] for i in range(layout.gdn_layers)),
                   tuple(tensors[f"gdn.{i}.window"] for i in range(layout.gdn_layers)))

    def to(self, device: torch.device, *, pin: bool = False) -> SavedPoint:
        """This point's tensors on `device` (tokens stay on the host); `pin`: in pinned host memory."""
        def move(t: torch.Tensor) -> torch.Tensor:
            if pin:
                return t.cpu().pin_memory()
            return t.to(device, non_blocking=False)
        return SavedPoint(self.key, self.length, self.tokens, tuple(map(move, self.keys)),
                          tuple(map(move, self.values)), tuple(map(move, self.states)),
                          tuple(map(move, self.windows)))

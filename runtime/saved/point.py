"""A saved point: every tensor a continuation of a state's first `length` positions reads.

Per attention layer, the keys and values of positions [0, length) as the fork attention reads them (after
the key norm and RoPE); per Gated DeltaNet layer, the fp32 recurrent state at `length` and the conv window
(the conv inputs of the CONV_TAPS - 1 positions before `length`). `length` is a multiple of CHUNK, so a
continuation starts on a chunk boundary with no straddling chunk to recompute. PointLayout fixes the shapes
and dtypes a model's points have: what a checkpoint read from disk is checked against.

A point's keys and values are a run of extents: a point made by extending another shares that point's
extents and adds one for its new positions, so an agent history that grows a few hundred positions a step
costs a step's keys and values and one set of GDN states, not its whole history again.
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
    dtype: torch.dtype  # keys and values: the weights' dtype, as the attention reads them
    window_dtype: torch.dtype | None = None  # the conv windows': the activations' (None: dtype)

    @classmethod
    def of(cls, cfg: TextConfig, dtype: torch.dtype, window_dtype: torch.dtype | None = None) -> PointLayout:
        gdn = sum(kind == LINEAR for kind in cfg.layer_types)
        return cls(len(cfg.layer_types) - gdn, gdn, (cfg.num_kv_heads, cfg.head_dim),
                   (cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim),
                   (CONV_TAPS - 1, cfg.conv_dim), dtype, None if window_dtype == dtype else window_dtype)

    def shapes(self, length: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Every tensor of a point of `length` positions by its checkpoint name: (shape, dtype)."""
        out: dict[str, tuple[tuple[int, ...], torch.dtype]] = {"tokens": ((length,), torch.int64)}
        for i in range(self.attention_layers):
            out[f"attention.{i}.keys"] = ((length, *self.kv), self.dtype)
            out[f"attention.{i}.values"] = ((length, *self.kv), self.dtype)
        for i in range(self.gdn_layers):
            out[f"gdn.{i}.state"] = (self.state, torch.float32)
            out[f"gdn.{i}.window"] = (self.window, self.window_dtype or self.dtype)
        return out

    def fixed_shapes(self, length: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """A checkpoint's tensors beside its extents: token ids, GDN states and conv windows."""
        return {k: v for k, v in self.shapes(length).items() if not k.startswith("attention.")}

    def extent_shapes(self, start: int, end: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """A checkpoint's tensors of the extent [start, end): "kv.START.attention.I.keys" and "...values"."""
        out = {}
        for i in range(self.attention_layers):
            for part in ("keys", "values"):
                out[f"kv.{start}.attention.{i}.{part}"] = ((end - start, *self.kv), self.dtype)
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


MAX_EXTENTS = 32  # a point that would have more holds one extent over all its positions instead


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass(frozen=True, eq=False)
class Extent:
    """Keys and values of positions [start, end) of one token prefix, every attention layer: the part of a
    saved point's keys and values that the points extending it share. `id` names that run of that prefix
    (the prefix's key at `end` and `start`), so two tiers or checkpoints holding it hold the same bits."""

    id: str
    start: int
    end: int
    keys: tuple[torch.Tensor, ...]  # per attention layer [end - start, kv heads, head dim]
    values: tuple[torch.Tensor, ...]

    @property
    def nbytes(self) -> int:
        return _nbytes(self.keys + self.values)

    def to(self, device: torch.device, *, pin: bool = False) -> Extent:
        return Extent(self.id, self.start, self.end, tuple(_move(t, device, pin) for t in self.keys),
                      tuple(_move(t, device, pin) for t in self.values))


def extent_id(prefix_key: str, start: int) -> str:
    return f"{prefix_key}:{start}"


def joined(extents: tuple[Extent, ...], prefix_key: str) -> Extent:
    """One extent of a run of extents' positions (a copy), under the key of the prefix they end."""
    layers = range(len(extents[0].keys))
    return Extent(extent_id(prefix_key, extents[0].start), extents[0].start, extents[-1].end,
                  tuple(_cat([e.keys[i] for e in extents]) for i in layers),
                  tuple(_cat([e.values[i] for e in extents]) for i in layers))


@dataclass(frozen=True, eq=False)
class SavedPoint:
    key: str  # the address of its token prefix (keys.prefix_keys)
    length: int  # positions held, a multiple of CHUNK
    tokens: torch.Tensor  # [length] int64, on the host
    extents: tuple[Extent, ...]  # its keys and values: runs covering [0, length) in order
    states: tuple[torch.Tensor, ...]  # per GDN layer [value heads, key dim, value dim] fp32
    windows: tuple[torch.Tensor, ...]  # per GDN layer [CONV_TAPS - 1, conv channels]

    def __post_init__(self) -> None:
        assert self.length > 0 and self.length % CHUNK == 0 and self.tokens.shape == (self.length,)
        ends = [0] + [e.end for e in self.extents]
        assert [e.start for e in self.extents] == ends[:-1] and ends[-1] == self.length, "extents cover it"

    @classmethod
    def whole(cls, key: str, length: int, tokens: torch.Tensor, keys, values, states, windows) -> SavedPoint:
        """A point whose keys and values are one extent of all its positions."""
        return cls(key, length, tokens, (Extent(extent_id(key, 0), 0, length, tuple(keys), tuple(values)),),
                   tuple(states), tuple(windows))

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention layer `i`'s keys and values of all its positions (one tensor each; a copy when it has
        several extents)."""
        return _cat([e.keys[i] for e in self.extents]), _cat([e.values[i] for e in self.extents])

    @property
    def keys(self) -> tuple[torch.Tensor, ...]:
        """Per attention layer, the keys of all its positions (SavedPoint.layer, every layer)."""
        return tuple(self.layer(i)[0] for i in range(len(self.extents[0].keys)))

    @property
    def values(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.layer(i)[1] for i in range(len(self.extents[0].values)))

    @property
    def fixed_nbytes(self) -> int:
        """Bytes of what it holds beside its extents: tokens, GDN states and conv windows."""
        return _nbytes((self.tokens, *self.states, *self.windows))

    @property
    def nbytes(self) -> int:
        """Bytes of all it holds, extents it shares with other points included."""
        return self.fixed_nbytes + sum(e.nbytes for e in self.extents)

    @property
    def device(self) -> torch.device:
        return (self.states or self.extents[0].keys)[0].device

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor by its checkpoint name (PointLayout.shapes), keys and values whole."""
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
        check_tensors(tensors, layout.shapes(length))
        return cls.whole(key, length, tensors["tokens"],
                         [tensors[f"attention.{i}.keys"] for i in range(layout.attention_layers)],
                         [tensors[f"attention.{i}.values"] for i in range(layout.attention_layers)],
                         [tensors[f"gdn.{i}.state"] for i in range(layout.gdn_layers)],
                         [tensors[f"gdn.{i}.window"] for i in range(layout.gdn_layers)])

    def with_extents(self, extents: tuple[Extent, ...], device: torch.device, *, pin: bool = False
                     ) -> SavedPoint:
        """This point on `device` (tokens stay on the host) with `extents` (already there) for its keys and
        values; `pin`: in pinned host memory."""
        return SavedPoint(self.key, self.length, self.tokens, extents,
                          tuple(_move(t, device, pin) for t in self.states),
                          tuple(_move(t, device, pin) for t in self.windows))

    def to(self, device: torch.device, *, pin: bool = False) -> SavedPoint:
        """This point's tensors on `device` (tokens stay on the host); `pin`: in pinned host memory."""
        return self.with_extents(tuple(e.to(device, pin=pin) for e in self.extents), device, pin=pin)


def check_tensors(tensors: dict[str, torch.Tensor], want: dict[str, tuple[tuple[int, ...], torch.dtype]]
                  ) -> None:
    """PointRefused unless `tensors` are exactly `want`'s names, shapes and dtypes."""
    if set(tensors) != set(want):
        extra, missing = sorted(set(tensors) - set(want)), sorted(set(want) - set(tensors))
        raise PointRefused(f"other model: tensors do not match this model's saved points (missing "
                           f"{missing[:3]}, unexpected {extra[:3]})")
    for name, (shape, dtype) in want.items():
        t = tensors[name]
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise PointRefused(f"other model: tensor {name} is {t.dtype} {list(t.shape)}; this model's "
                               f"points hold {dtype} {list(shape)}")


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _move(t: torch.Tensor, device: torch.device, pin: bool) -> torch.Tensor:
    """`t` on `device`; `pin`: in pinned host memory, in one copy (pinned blocks are reused once freed)."""
    if pin:
        out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        return out.copy_(t)
    return t.to(device, non_blocking=False)

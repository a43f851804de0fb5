"""The saved-state store: points in GPU memory, pinned host memory and a checkpoint directory.

`find` gives the longest saved prefix of a root's tokens from the fastest tier holding it, moved to the
engine's device (a host or disk point is promoted); `save` keeps a new point in the fastest tier and writes
it to the checkpoint directory (write-through: a later process resumes from it). A point evicted from GPU
memory moves to host memory, unless another point still in GPU memory extends it (its keys and values live
on in that one; its GDN states are dropped); one evicted from host memory remains only on disk (if there is
a directory).
A session (an instance's `x_session`) pins its latest point against eviction and can drop its points.
Each tier keeps one copy of an extent its points share (tiers.Tier); a point moved between tiers copies only
the extents the tier it moves to lacks.
Thread-safe: Program.run's callers share one store.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from flidec.runtime.saved.checkpoints import Checkpoints
from flidec.runtime.saved.keys import BLOCK, prefix_keys
from flidec.runtime.saved.point import PointLayout, SavedPoint
from flidec.runtime.saved.tiers import Tier

GIB = 1 << 30


@dataclass(frozen=True)
class SavedStats:
    """What a store has done since it was made, and what each tier holds now."""

    hits: int = 0  # roots resumed from a saved point
    misses: int = 0  # roots looked up with no saved prefix
    tokens_reused: int = 0  # positions resumed instead of computed
    saved: int = 0  # points made
    from_tier: dict[str, int] = field(default_factory=dict)  # hits by the tier they came from
    bytes: dict[str, int] = field(default_factory=dict)  # per tier: bytes held now
    points: dict[str, int] = field(default_factory=dict)  # per tier: points held now
    evicted: dict[str, int] = field(default_factory=dict)  # per tier: points evicted
    superseded: int = 0  # of those, points not moved down a tier: another point extends them
    refused: dict[str, int] = field(default_factory=dict)  # checkpoints refused, by reason
    write_failures: int = 0  # checkpoints that could not be written


class SavedStates:
    """`device`: where the engine reads points (a "gpu" tier there when it is CUDA); budgets in bytes."""

    def __init__(self, scope: str, layout: PointLayout, device: torch.device, *, gpu_bytes: int = 4 * GIB,
                 host_bytes: int = 8 * GIB, checkpoints: str | Path | None = None):
        self.scope, self.layout, self.device = scope, layout, device
        self.cuda = device.type == "cuda"
        cpu = torch.device("cpu")
        self.tiers = ([Tier("gpu", gpu_bytes, device)] if self.cuda else []) + [
            Tier("host", host_bytes, cpu, pin=self.cuda)]
        self.disk = Checkpoints(checkpoints, scope, layout) if checkpoints is not None else None
        self.sessions: dict[str, list[str]] = {}  # session id -> keys of its points, latest last
        self._lock = threading.Lock()
        self._counts = {"hits": 0, "misses": 0, "tokens_reused": 0, "saved": 0}
        self._from: dict[str, int] = {}
        self._superseded = 0  # points evicted and not moved down: another point extends them

    def find(self, tokens: Sequence[int] | np.ndarray, limit: int, keys: Sequence[str] | None = None
             ) -> SavedPoint | None:
        """The longest saved prefix of `tokens` of at most `limit` positions, on the engine's device; `keys`:
        the tokens' block keys (keys.prefix_keys), if the caller has them."""
        blocks = min(limit, len(tokens)) // BLOCK
        if blocks == 0:
            return None
        keys = keys[:blocks] if keys is not None else prefix_keys(self.scope, tokens, blocks)
        with self._lock:
            if self.disk is not None:
                self.disk.refresh()
            for b in reversed(range(blocks)):
                point, tier = self._get(keys[b])
                if point is None:
                    continue
                if not np.array_equal(point.tokens.numpy(), np.asarray(tokens[: point.length])):
                    continue  # a hash collision: not this prefix
                self._counts["hits"] += 1
                self._counts["tokens_reused"] += point.length
                self._from[tier] = self._from.get(tier, 0) + 1
                return point
            self._counts["misses"] += 1
        return None

    def has(self, key: str) -> bool:
        with self._lock:
            return any(key in t for t in self.tiers) or (self.disk is not None and self.disk.has(key))

    def save(self, point: SavedPoint, session: str | None = None) -> None:
        with self._lock:
            self._counts["saved"] += 1
            if session is not None:
                keys = self.sessions.setdefault(session, [])
                if point.key not in keys:
                    keys.append(point.key)
            self._keep(0, point)
            if self.disk is not None:
                self.disk.write(point)

    def flush(self) -> None:
        """Wait until every saved point is on disk (a no-op without a checkpoint directory)."""
        if self.disk is not None:
            self.disk.flush()

    def drop(self, session: str) -> None:
        """Forget every point saved under a session, in every tier and on disk."""
        self.flush()  # a write still queued would bring a dropped point back
        with self._lock:
            keys = self.sessions.pop(session, [])
            for key in keys:
                for t in self.tiers:
                    if key in t:
                        t.pop(key)
            if self.disk is not None:
                self.disk.remove(set(keys))

    def stats(self) -> SavedStats:
        with self._lock:
            tiers = list(self.tiers)
            bytes_ = {t.name: t.nbytes for t in tiers}
            points = {t.name: len(t) for t in tiers}
            if self.disk is not None:
                bytes_["disk"] = self.disk.nbytes()
            return SavedStats(**self._counts, from_tier=dict(self._from), bytes=bytes_, points=points,
                              evicted={t.name: t.evicted for t in tiers}, superseded=self._superseded,
                              refused=dict(self.disk.refused) if self.disk else {},
                              write_failures=self.disk.write_failures if self.disk else 0)

    # -- internals (the lock held) ---------------------------------------------------------------------------

    def _get(self, key: str) -> tuple[SavedPoint | None, str]:
        for i, t in enumerate(self.tiers):
            point = t.get(key)
            if point is not None:
                if i > 0:  # promoted to the fastest tier (or back down, if it does not fit there)
                    t.pop(key)
                    point = self._keep(0, point)
                return point, t.name
        if self.disk is not None and self.disk.has(key):
            point = self.disk.read(key, self.device)
            if point is not None:
                return self._keep(0, point), "disk"
        return None, ""

    def _keep(self, level: int, point: SavedPoint) -> SavedPoint:
        """Put `point` in tier `level` (as that tier holds it, Tier.adopt: returned), moving what it evicts
        one tier down, except a point another point in the tier extends: its keys and values live on there,
        and moving its GDN states would cost the request a copy for a point an agent does not go back to."""
        pinned = {keys[-1] for keys in self.sessions.values() if keys}
        tier = self.tiers[level]
        point = tier.adopt(point)
        for out in tier.put(point, pinned):
            if level + 1 == len(self.tiers):
                continue  # out of memory: on disk if it was written
            if out.key in tier.extended:
                self._superseded += 1
                continue
            self._keep(level + 1, out)
        return point

"""One memory tier of saved points (GPU memory or host memory): least recently used first out, within a
budget in bytes. A pinned point (a session's latest) leaves only when no unpinned one is left to evict.

Points in a tier share extents (point.Extent): the tier holds one copy of each, counted once in its bytes
and freed when the last point holding it leaves.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

import torch

from flidec.runtime.saved.point import Extent, SavedPoint


class Tier:
    def __init__(self, name: str, budget: int, device: torch.device, *, pin: bool = False):
        self.name, self.budget, self.device, self.pin = name, budget, device, pin
        self.points: OrderedDict[str, SavedPoint] = OrderedDict()  # least recently used first
        self.extents: dict[str, tuple[Extent, int]] = {}  # id -> (extent, points holding it)
        self.nbytes = 0
        self.evicted = 0
        self.extended: set[str] = set()  # of the points the last put evicted, those another point extended

    def __contains__(self, key: str) -> bool:
        return key in self.points

    def __len__(self) -> int:
        return len(self.points)

    def get(self, key: str) -> SavedPoint | None:
        point = self.points.get(key)
        if point is not None:
            self.points.move_to_end(key)
        return point

    def adopt(self, point: SavedPoint) -> SavedPoint:
        """`point` as this tier holds it: on its device, with the tier's copy of every extent it has already
        (the others copied here); the point itself when it is already the tier's."""
        on_device = point.device.type == self.device.type
        if on_device and all(self.extents.get(e.id, (e,))[0] is e for e in point.extents):
            return point
        extents = tuple(self.extents[e.id][0] if e.id in self.extents
                        else e if on_device else e.to(self.device, pin=self.pin) for e in point.extents)
        if on_device:
            return SavedPoint(point.key, point.length, point.tokens, extents, point.states, point.windows)
        return point.with_extents(extents, self.device, pin=self.pin)

    def cost(self, point: SavedPoint) -> int:
        """The bytes keeping `point` would add: its own and its extents this tier does not hold."""
        return point.fixed_nbytes + sum(e.nbytes for e in point.extents if e.id not in self.extents)

    def put(self, point: SavedPoint, pinned: set[str]) -> list[SavedPoint]:
        """Keep `point` (adopted: Tier.adopt) as the most recently used and return the points evicted to stay
        within the budget; a point larger than the whole budget is not kept (returned itself)."""
        if point.key in self.points:
            self.pop(point.key)
        if self.cost(point) > self.budget:
            return [point]
        self.points[point.key] = point
        self.nbytes += point.fixed_nbytes
        for e in point.extents:
            held, count = self.extents.get(e.id, (e, 0))
            assert held is e, "a tier keeps points it adopted"
            self.extents[e.id] = (e, count + 1)
            self.nbytes += e.nbytes if count == 0 else 0
        out = []
        self.extended = set()
        while self.nbytes > self.budget:
            victim = next((k for k in self.points if k not in pinned and k != point.key), None)
            if victim is None:
                victim = next(k for k in self.points if k != point.key)  # the budget wins over pins
            if self.extents[self.points[victim].extents[-1].id][1] > 1:  # another point holds its last run
                self.extended.add(victim)
            out.append(self.pop(victim))
            self.evicted += 1
        return out

    def pop(self, key: str) -> SavedPoint:
        point = self.points.pop(key)
        self.nbytes -= point.fixed_nbytes
        for e in point.extents:
            held, count = self.extents[e.id]
            if count == 1:
                del self.extents[e.id]
                self.nbytes -= e.nbytes
            else:
                self.extents[e.id] = (held, count - 1)
        return point

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.points))

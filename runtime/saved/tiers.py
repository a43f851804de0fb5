"""One memory tier of saved points (GPU memory or host memory): least recently used first out, within a
budget in bytes. A pinned point (a session's latest) leaves only when no unpinned one is left to evict.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from flidec.runtime.saved.point import SavedPoint


class Tier:
    def __init__(self, name: str, budget: int):
        self.name, self.budget = name, budget
        self.points: OrderedDict[str, SavedPoint] = OrderedDict()  # least recently used first
        self.nbytes = 0
        self.evicted = 0

    def __contains__(self, key: str) -> bool:
        return key in self.points

    def __len__(self) -> int:
        return len(self.points)

    def get(self, key: str) -> SavedPoint | None:
        point = self.points.get(key)
        if point is not None:
            self.points.move_to_end(key)
        return point

    def put(self, point: SavedPoint, pinned: set[str]) -> list[SavedPoint]:
        """Keep `point` (most recently used) and return the points evicted to stay within the budget; a point
        larger than the whole budget is not kept (returned itself)."""
        if point.nbytes > self.budget:
            return [point]
        if point.key in self.points:
            self.nbytes -= self.points.pop(point.key).nbytes
        self.points[point.key] = point
        self.nbytes += point.nbytes
        out = []
        while self.nbytes > self.budget:
            victim = next((k for k in self.points if k not in pinned and k != point.key), None)
            if victim is None:
                victim = next(k for k in self.points if k != point.key)  # the budget wins over pins
            out.append(self.pop(victim))
            self.evicted += 1
        return out

    def pop(self, key: str) -> SavedPoint:
        point = self.points.pop(key)
        self.nbytes -= point.nbytes
        return point

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.points))

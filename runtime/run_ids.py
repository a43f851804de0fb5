"""The ids of text runs already tokenized, so a growing text is tokenized only where it is new.

Consumes runs (runtime/next_token.py `text_runs`: a text cut where a cut keeps its ids, so each run's ids are
the same whatever text holds it) and a batch encoder; produces each run's ids. An agent's history grows at
its end, and its runs before the last one are cut at the same places as the step before, so a step encodes
its last runs only. The cache holds at most `budget_chars` characters of runs, least recently used first
out; it is a cache of a pure function, so it never changes an id.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

BUDGET_CHARS = 2_000_000  # ~500k tokens of runs: a few dozen agent histories; ~20 MB of ids


class RunIds:
    """Run text -> ids, an LRU bounded in characters; safe to share between threads."""

    def __init__(self, encode_batch: Callable[[list[str]], list[list[int]]],
                 budget_chars: int = BUDGET_CHARS):
        self._encode_batch = encode_batch
        self.budget_chars = budget_chars
        self._ids: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._ids)

    def ids(self, runs: Sequence[str]) -> list[tuple[int, ...]]:
        """Each run's ids, in order: the runs not held are encoded in one batch (each distinct run once)."""
        with self._lock:
            held = {r: self._ids.get(r) for r in runs}
            for r, v in held.items():
                if v is not None:
                    self._ids.move_to_end(r)
        missing = [r for r, v in held.items() if v is None]
        if missing:
            for r, v in zip(missing, self._encode_batch(missing), strict=True):
                held[r] = tuple(v)
        with self._lock:
            self.hits += len(runs) - len(missing)
            self.misses += len(missing)
            for r in missing:
                self._put(r, held[r])
        return [held[r] for r in runs]

    def _put(self, run: str, ids: tuple[int, ...]) -> None:
        if len(run) > self.budget_chars or run in self._ids:
            return
        self._ids[run] = ids
        self._chars += len(run)
        while self._chars > self.budget_chars:
            old, _ = self._ids.popitem(last=False)
            self._chars -= len(old)

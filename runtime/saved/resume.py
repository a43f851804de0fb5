"""What a plan resumes from and what it saves: the Program's side of saved states.

A plan's root resumes from the longest saved prefix of its ids that leaves at least one id to compute
(Plan.held). It saves a point when its tree's state is `resumable` or the instance names a session: at
the last BLOCK boundary at least SAVE_MARGIN ids before the end of the state's text, past what it resumed
from. The margin is there because the next request's state extends this one's text: its last few ids may
tokenize differently once more text follows them (a word grows, a space joins the next word), and a point
must be a prefix of the next request's ids to be found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from flidec.ir.errors import InstanceError
from flidec.runtime.binder import Plan
from flidec.runtime.saved.keys import BLOCK, prefix_keys
from flidec.runtime.saved.point import MAX_EXTENTS, Extent, SavedPoint, extent_id, joined
from flidec.runtime.saved.store import SavedStates

SAVE_MARGIN = 8
SESSION_KEY = "x_session"


@dataclass(frozen=True, slots=True)
class Session:
    """An instance's `x_session`: a string id, or {"id": string, "drop": boolean} (drop: forget the
    session's saved points once this instance is answered)."""

    id: str
    drop: bool = False


def split_session(instance: object) -> tuple[object, Session | None]:
    """The instance without its `x_session` key, and the session it names (InstanceError for a bad one)."""
    if not isinstance(instance, Mapping) or SESSION_KEY not in instance:
        return instance, None
    rest = {k: v for k, v in instance.items() if k != SESSION_KEY}
    value = instance[SESSION_KEY]
    if isinstance(value, str) and value:
        return rest, Session(value)
    if (isinstance(value, Mapping) and isinstance(value.get("id"), str) and value["id"]
            and set(value) <= {"id", "drop"} and isinstance(value.get("drop", False), bool)):
        return rest, Session(value["id"], value.get("drop", False))
    raise InstanceError([f'{SESSION_KEY}: must be a non-empty string or {{"id": string, "drop": boolean}}'])


def resume(plan: Plan, store: SavedStates, *, saves: bool) -> int:
    """Set `plan.held` to the longest saved prefix of its root and, when it `saves`, `plan.save` and
    `plan.save_key` to the point it makes (0: none); the positions held (0: none). The root's block keys
    are hashed once for both."""
    root = np.asarray(plan.ids[0], dtype=np.int64)
    keys = prefix_keys(store.scope, root, len(root) // BLOCK)
    point = store.find(root, len(root) - 1, keys)
    plan.held = point
    plan.save, plan.save_key = 0, ""  # a run done again (the Scheduler's halves) decides afresh
    held = 0 if point is None else point.length
    n = (plan.state_end - SAVE_MARGIN) // BLOCK * BLOCK
    if saves and held < n <= len(root) and not store.has(keys[n // BLOCK - 1]):
        plan.save, plan.save_key = n, keys[n // BLOCK - 1]
    return held


def make_point(plan: Plan, captured) -> SavedPoint:
    """The saved point of a plan's captured tensors (reference/executor.Captured or an engine's own: keys and
    values of positions [captured.start, length)). A point that extends the one its plan resumed from
    shares that point's extents and adds one for its new positions; past MAX_EXTENTS, one over all."""
    n, start, key = captured.length, captured.start, plan.save_key
    assert n == plan.save and key, "a plan's capture is the point it saves"
    tokens = torch.from_numpy(np.fromiter(plan.ids[0][:n], dtype=np.int64, count=n))  # not torch.tensor: slow
    parent = plan.held
    at = parent.length if parent is not None else 0
    assert start <= at < n, "a capture holds every position past the point it resumed from"

    def rows(t: torch.Tensor) -> torch.Tensor:  # positions [at, n) of a capture's positions [start, n)
        return t if start == at else t[at - start :].clone()

    own = Extent(extent_id(key, at), at, n, tuple(map(rows, captured.keys)),
                 tuple(map(rows, captured.values)))
    extents = (*parent.extents, own) if parent is not None else (own,)
    if len(extents) > MAX_EXTENTS:
        extents = (joined(extents, key),)
    return SavedPoint(key, n, tokens, extents, tuple(captured.states), tuple(captured.windows))

"""A request's route: what the router matches against the replicas holding saved states.

Consumes an instance (a System One body or any tree's instance JSON), its tree and the artifact's tokenizer;
produces a Route: the instance's session id (`x_session`, a string or {"id"}) and the keys of its state
text's token prefixes, one per whole block of BLOCK ids, chain-hashed as runtime/saved/keys.py hashes saved
points (from a scope of the tree's name, not the artifact's: the keys only have to agree with each other).
A continuation of a state shares the keys of every block its earlier steps' states had whole (the last
few ids of a state may tokenize differently once more text follows, so the longest shared key is the one
before). Relies on the tokenizer alone: no compiler, no model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from flidec.ir.tree import Tree
from flidec.runtime.saved.keys import BLOCK, prefix_keys
from flidec.runtime.saved.resume import SESSION_KEY

MAX_BLOCKS = 1024  # keys kept a route: 65,536 state ids, past any tree's bound here


@dataclass(frozen=True, slots=True)
class Route:
    session: str | None = None
    keys: tuple[str, ...] = ()  # the state's prefixes of 1, 2, ... whole blocks, shortest first


def session_of(instance: object) -> str | None:
    """The instance's session id, if it names one well (a bad one is the replica's error to report)."""
    if not isinstance(instance, Mapping):
        return None
    value = instance.get(SESSION_KEY)
    if isinstance(value, Mapping):
        value = value.get("id")
    return value if isinstance(value, str) and value else None


def tree_scope(tree: str) -> str:
    return hashlib.sha256(f"flidec-route:{tree}".encode()).hexdigest()


def route_of(instance: object, tree: Tree, encode) -> Route:
    """The route of `instance` of `tree`; `encode(text) -> ids` is the artifact's literal tokenizer
    (ModelTokenizer.encode)."""
    session = session_of(instance)
    text = instance.get(tree.state.name) if isinstance(instance, Mapping) else None
    if not isinstance(text, str) or not text:
        return Route(session)
    ids = encode(text)
    blocks = min(len(ids) // BLOCK, MAX_BLOCKS)
    keys = prefix_keys(tree_scope(tree.name), ids, blocks) if blocks else []
    return Route(session, tuple(keys))

"""A request's route: what the router matches against the replicas holding saved states.

Consumes an instance (a System One body or any tree's instance JSON) and its tree; produces a Route: the
instance's session id (`x_session`, a string or {"id"}) and the keys of its state text's prefixes, one per
whole block of BLOCK_BYTES bytes of its UTF-8, chain-hashed from a scope of the tree's name. An agent's
next state extends its last one's text, so it shares the key of every block the last state had whole, and
the longest shared key points to the replica that saved that state. The keys hash text, not token ids
(the saved-state store's keys, runtime/saved/keys.py): they only have to agree with each other, and text
needs no tokenizer, so routing a long state costs the ingress microseconds, not the milliseconds its
tokenizing would.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from flidec.ir.tree import Tree
from flidec.runtime.saved.keys import chain_keys
from flidec.runtime.saved.resume import SESSION_KEY

BLOCK_BYTES = 256  # about 64 tokens of prose, the saved-state store's block: a short state has keys too
MAX_BLOCKS = 4096  # keys kept a route: 1 MiB of state text, past any tree's token bound here


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


def text_keys(scope: bytes, text: str) -> tuple[str, ...]:
    """The keys of `text`'s prefixes of 1, 2, ... whole blocks (hex, 32 digits each)."""
    data = text.encode("utf-8", "surrogatepass")
    blocks = min(len(data) // BLOCK_BYTES, MAX_BLOCKS)
    return tuple(chain_keys(scope, (data[b * BLOCK_BYTES : (b + 1) * BLOCK_BYTES] for b in range(blocks))))


def route_of(instance: object, tree: Tree) -> Route:
    """The route of `instance` of `tree`: its session and its state text's block keys."""
    session = session_of(instance)
    text = instance.get(tree.state.name) if isinstance(instance, Mapping) else None
    if not isinstance(text, str) or not text:
        return Route(session)
    return Route(session, text_keys(hashlib.sha256(f"flidec-route:{tree.name}".encode()).digest(), text))

"""The parts of saved states: prefix keys (a key covers exactly its blocks and its scope), a memory tier's
LRU with pins and budget, a point's bytes as its layout counts them, and a held prefix packed as a stored
root whose rows follow every computed row."""

from __future__ import annotations

import torch

from flidec.runtime.binder import Plan, _pack
from flidec.runtime.meta import CHUNK
from flidec.runtime.saved.keys import BLOCK, prefix_keys
from flidec.runtime.saved.point import Extent, PointLayout, SavedPoint, extent_id, joined
from flidec.runtime.saved.store import SavedStates
from flidec.runtime.saved.tiers import Tier

SCOPE = "ab" * 32


def test_a_prefix_key_depends_on_its_blocks_and_scope_only() -> None:
    tokens = list(range(5 * BLOCK + 7))
    keys = prefix_keys(SCOPE, tokens, 5)
    assert keys[:3] == prefix_keys(SCOPE, tokens[: 3 * BLOCK], 3)  # later tokens do not change a prefix's key
    changed = list(tokens)
    changed[2 * BLOCK + 1] += 1
    other = prefix_keys(SCOPE, changed, 5)
    assert other[:2] == keys[:2] and all(a != b for a, b in zip(other[2:], keys[2:], strict=True))
    assert prefix_keys("cd" * 32, tokens, 5)[0] != keys[0]
    assert len(set(keys)) == 5


LAYOUT = PointLayout(attention_layers=2, gdn_layers=3, kv=(2, 4), state=(2, 4, 4), window=(3, 8),
                     dtype=torch.bfloat16)


def point(key: str, length: int = CHUNK) -> SavedPoint:
    shapes = LAYOUT.shapes(length)
    tensors = {name: torch.zeros(shape, dtype=dtype) for name, (shape, dtype) in shapes.items()}
    return SavedPoint.from_tensors(key, length, tensors, LAYOUT)


def test_a_points_bytes_are_its_layouts() -> None:
    for length in (CHUNK, 3 * CHUNK):
        assert point("a", length).nbytes == LAYOUT.nbytes(length)


def test_a_tier_evicts_least_recently_used_unpinned_first_within_its_budget() -> None:
    size = point("x").nbytes
    tier = Tier("host", 3 * size, torch.device("cpu"))
    for k in "abc":
        assert tier.put(point(k), set()) == []
    tier.get("a")  # now b is the least recently used
    assert [p.key for p in tier.put(point("d"), set())] == ["b"]
    assert [p.key for p in tier.put(point("e"), {"c"})] == ["a"]  # c is pinned: a goes instead
    assert list(tier) == ["c", "d", "e"] and tier.nbytes == 3 * size and tier.evicted == 2
    assert [p.key for p in tier.put(point("f"), {"c", "d", "e"})] == ["c"]  # the budget wins over pins
    big = point("g", 4 * CHUNK)
    assert tier.put(big, set()) == [big] and "g" not in tier  # larger than the budget: not kept


def extended(parent: SavedPoint, key: str, more: int = CHUNK) -> SavedPoint:
    """A point of `more` positions past `parent`, sharing its extents (as resume.make_point makes one)."""
    kv = tuple(torch.full((more, *LAYOUT.kv), float(len(key)), dtype=LAYOUT.dtype)
               for _ in range(LAYOUT.attention_layers))
    own = Extent(extent_id(key, parent.length), parent.length, parent.length + more, kv, kv)
    n = parent.length + more
    return SavedPoint(key, n, torch.arange(n), (*parent.extents, own), parent.states, parent.windows)


def test_points_in_a_tier_share_extents_counted_once_and_freed_with_the_last() -> None:
    a = point("a")
    b = extended(a, "b")
    ext = a.extents[0].nbytes
    tier = Tier("host", 10 * a.nbytes, torch.device("cpu"))
    tier.put(tier.adopt(a), set())
    tier.put(tier.adopt(b), set())
    assert tier.nbytes == a.fixed_nbytes + b.fixed_nbytes + ext + b.extents[1].nbytes
    assert len(tier.extents) == 2
    tier.pop("a")  # b still holds a's extent
    assert tier.nbytes == b.fixed_nbytes + ext + b.extents[1].nbytes and a.extents[0].id in tier.extents
    tier.pop("b")
    assert tier.nbytes == 0 and not tier.extents
    assert torch.equal(b.keys[0][: a.length], a.keys[0]) and b.keys[0].shape[0] == b.length
    whole = joined(b.extents, "b")
    assert (whole.start, whole.end) == (0, b.length) and torch.equal(whole.values[1], b.values[1])


def test_a_tier_adopts_a_point_with_its_own_copy_of_the_extents_it_holds() -> None:
    a = point("a")
    tier = Tier("host", 10 * a.nbytes, torch.device("cpu"))
    kept = tier.adopt(a)
    tier.put(kept, set())
    twin = SavedPoint.whole("a", a.length, a.tokens, a.keys, a.values, a.states, a.windows)  # same id, copy
    b = tier.adopt(extended(twin, "b"))
    assert b.extents[0] is kept.extents[0]  # the tier's copy, not the twin's
    assert tier.cost(b) == b.fixed_nbytes + b.extents[1].nbytes


def test_an_evicted_point_another_extends_is_not_moved_down_a_tier() -> None:
    a = point("a")
    b = extended(a, "b")
    c = point("c")  # no point extends it
    store = SavedStates("ab" * 32, LAYOUT, torch.device("cpu"))
    cpu = torch.device("cpu")
    room = a.nbytes + b.nbytes - a.extents[0].nbytes  # a and b, sharing a's extent
    store.tiers = [Tier("gpu", room, cpu), Tier("host", 10 * a.nbytes, cpu)]  # two tiers, both on the CPU
    for p in (a, b):
        store.save(p)
    store.save(c)  # evicts a (superseded by b: dropped), then b (moved down)
    stats = store.stats()
    assert stats.superseded == 1 and store.stats().points == {"gpu": 1, "host": 1}
    assert "b" in store.tiers[1] and "a" not in store.tiers[1] and "c" in store.tiers[0]


def test_a_held_prefix_packs_as_a_stored_root_after_every_computed_row() -> None:
    held = point("h", CHUNK)
    held = SavedPoint.whole(held.key, CHUNK, torch.arange(CHUNK), held.keys, held.values, held.states,
                            held.windows)
    resumed = Plan([list(range(CHUNK + 5)), [90, 91]], [-1, 0], [])
    resumed.held = held
    other = Plan([[7, 8, 9]], [-1], [])
    stream, _, _, roots = _pack([(0, resumed), (1, other)], None)
    meta = stream.meta
    (stored,) = meta.stored
    seg = meta.segments[stored]
    assert (seg.start, seg.length, seg.pos0, seg.parent) == (5 + 2 + 3, CHUNK, 0, -1)
    root = meta.segments[roots[0]]
    assert (root.length, root.pos0, root.parent, root.level) == (5, CHUNK, stored, 1)
    assert meta.live_rows == 10 and meta.num_rows == 10 + CHUNK
    assert stream.tokens[10:].tolist() == list(range(CHUNK))  # the stored rows hold the point's tokens
    assert stream.tokens[meta.segments[roots[0]].start:][:5].tolist() == list(range(CHUNK, CHUNK + 5))
    assert meta.gdn_src[roots[0]] == stored and meta.gdn_chunk0[roots[0]] == CHUNK
    assert meta.gdn_tail[roots[0]] == ()  # a point ends on a chunk boundary: nothing to recompute

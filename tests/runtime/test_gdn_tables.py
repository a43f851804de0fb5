"""Host tables of the forked Gated DeltaNet: the documented layout on a small forest (items, tails and the
chunk slots of the prep launch), padding to a bucket's capacities, and a clear refusal when a stream does
not fit."""

from __future__ import annotations

import pytest

from flidec.runtime.tables import ITEM_FIELDS, gdn_tables, max_chunks, state_slots
from flidec.testing.forests import pack_forest


def small_forest():
    """A (70 tokens, rows 0-69) with children B (60, rows 70-129) and C (3, rows 130-132); B's child D (2,
    rows 133-134) forks at 130, inside the chunk [128, 192); an empty root E."""
    toks = iter(range(1, 1000))
    nodes = [(-1, [next(toks) for _ in range(70)]), (0, [next(toks) for _ in range(60)]),
             (0, [next(toks) for _ in range(3)]), (1, [next(toks) for _ in range(2)]), (-1, [])]
    return pack_forest(nodes).meta


def test_gdn_tables_layout() -> None:
    meta = small_forest()
    assert state_slots(meta) == {0: 0, 1: 1}  # A's state at 64 (for B, C), B's at 128 (for D)
    t = gdn_tables(meta)
    assert ITEM_FIELDS == ("segment", "row0", "length", "chunk0", "tail", "src", "dst", "first")
    assert (t.per_level, t.num_levels, t.num_slots, t.num_chunks) == (2, 3, 2, 6)
    assert t.items.tolist() == [
        [0, 0, 70, 0, 0, -1, 0, 0], [0, 0, 0, 0, 0, -1, -1, 0],  # level 0: A (the empty root E has no item)
        [1, 70, 60, 64, 6, 0, 1, 2], [2, 130, 3, 64, 6, 0, -1, 4],  # level 1: B, C start from A's slot
        [3, 133, 2, 128, 2, 1, -1, 5], [0, 0, 0, 0, 0, -1, -1, 0],  # level 2: D starts from B's slot
    ]
    # A spans positions 0..69 (2 chunks), B 64..129 (2), C 64..72 (1), D 128..131 (1)
    assert t.chunks.tolist() == [[0, 0], [0, 1], [2, 0], [2, 1], [3, 0], [4, 0]]
    assert t.tails[2, :7].tolist() == [64, 65, 66, 67, 68, 69, -1]  # A's rows of positions 64..69
    assert t.tails[3, :6].tolist() == [64, 65, 66, 67, 68, 69]
    assert t.tails[4, :3].tolist() == [128, 129, -1]  # B's rows of positions 128, 129
    assert (t.tails[[0, 1, 5]] == -1).all()


def test_gdn_tables_pad_to_a_bucket_and_refuse_what_does_not_fit() -> None:
    meta = small_forest()
    capacity = max_chunks(meta.num_rows, len(meta.segments))
    assert capacity >= 6
    t = gdn_tables(meta, levels=5, per_level=4, num_slots=6, num_chunks=capacity)
    assert tuple(t.items.shape) == (20, len(ITEM_FIELDS)) and tuple(t.tails.shape) == (20, 64)
    assert t.num_slots == 6 and t.items[4 * 1 + 1].tolist() == [2, 130, 3, 64, 6, 0, -1, 4]
    padding = [i for i in range(20) if i not in (0, 4, 5, 8)]
    assert (t.items[padding, 2:5] == 0).all() and (t.items[padding, 5:7] == -1).all()  # length 0: no work
    assert t.chunks[:6].tolist() == [[0, 0], [0, 1], [4, 0], [4, 1], [5, 0], [8, 0]]
    assert (t.chunks[6:, 0] == -1).all() and t.num_chunks == capacity  # unused slots: no item
    for kwargs in ({"levels": 2}, {"per_level": 1}, {"num_slots": 1}, {"num_chunks": 5}):
        with pytest.raises(ValueError, match="the tables hold"):
            gdn_tables(meta, **kwargs)

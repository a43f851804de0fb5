"""bucket_topologies: template IR -> program IR, a small ladder of buckets per tree with its padding.

Consumes ir/template.Templates and, from the context, an optional profile of instance sizes per tree, the
stated worst-case padding and the largest bucket built without hints. Produces ir/program.ProgramIR: per tree
its worst case within the declared bounds (exact: from the template) and a ladder of Buckets, rows in
multiples of 64, each with the worst padding an instance landing in it can have. Rows come from the tree's
hints, else a profile's interval cover, else a 2^k / 3 * 2^k ladder (`bucket_tree`); the other dimensions
are the most an instance of that many rows can have, so rows alone decide a single instance's bucket, and
the largest bucket always holds the longest path one read can have, so every accepted instance can run.
"""

from __future__ import annotations

from collections.abc import Sequence

from flidec.ir.program import ROW_ALIGN, Bucket, ProgramIR, Rung, TreeProgram
from flidec.ir.template import (
    Sizes,
    Templates,
    TreeTemplate,
    const_tokens,
    max_reads_per_segment,
    min_rows,
    segments_preorder,
    worst_path_rows,
    worst_sizes,
)
from flidec.passes.context import CompileContext
from flidec.passes.manager import register


@register("bucket_topologies", level_in="template", level_out="program")
def bucket_topologies(ts: Templates, ctx: CompileContext) -> ProgramIR:
    profiles = {name: [s if isinstance(s, Sizes) else Sizes(*s) for s in sizes]
                for name, sizes in ctx.profile.items()}
    trees = tuple(bucket_tree(t, profiles.get(t.tree, []), ctx.padding, ctx.max_rows) for t in ts.trees)
    return ProgramIR(trees, ctx.padding)


def round_rows(n: int) -> int:
    return max(ROW_ALIGN, -(-n // ROW_ALIGN) * ROW_ALIGN)


def bucket_tree(t: TreeTemplate, profile: Sequence[Sizes], padding: float, max_rows: int) -> TreeProgram:
    """The tree's ladder. Rows: the bucket hints when it has any (rounded up to 64 rows); else, with a
    profile, the fewest buckets that keep every profiled instance within the stated padding (a greedy
    interval cover, which is optimal; 64-row rounding can force more under 256 rows); else a ladder from
    the smallest instance to the worst case through 2^k and 3 * 2^k rows (padding under a third, where
    doubling pads up to a half: the row-wise kernels cost in proportion to a bucket's rows, and every bucket
    shares the kernels, so a finer ladder costs a recording and a CUDA graph per bucket, not kernels).
    Whatever the basis, a bucket is added where the others stop short of the longest path one read can
    have within the bounds (ir/template.worst_path_rows): the runtime splits an instance over the largest
    bucket at tree boundaries (TreeProgram.bucket_for returns None), and each read's path must fit it.
    Segments, reads, depth and labels per bucket are the most an instance of that many rows can have
    (`max_segments`)."""
    worst = worst_sizes(t)
    least = min_rows(t)
    outside = [p for p in profile if not _within(p, worst)]
    if outside:
        raise ValueError(f"tree {t.tree}: profiled instance {outside[0]} is outside the declared bounds "
                         f"{worst}")
    if t.buckets:
        rows, basis = sorted({round_rows(h) for h in t.buckets}), "hints"
    elif profile:
        rows, basis = _cover(sorted(p.rows for p in profile), padding, round_rows(worst.rows)), "profile"
    else:
        rows, basis = _ladder(least, min(worst.rows, max_rows)), "bounds"
    path = round_rows(worst_path_rows(t))
    if rows[-1] < path:  # every instance within the bounds must run: each read's path fits the largest bucket
        rows.append(path)
    reads_per_row = max_reads_per_segment(t)
    rungs = []
    for k, r in enumerate(rows):
        bucket = Bucket(f"r{r}", r, max_segments(t, worst, r), worst.depth,
                        min(worst.reads, r * reads_per_row), worst.labels)
        below = rows[k - 1] if k else 0
        landing = [p.rows for p in profile if below < p.rows <= r]
        smallest = min(landing) if landing else max(below + 1, least)  # no profiled instance: the bounds
        rungs.append(Rung(bucket, round(max(0, r - smallest) / r, 4)))
    return TreeProgram(t, worst, tuple(rungs), basis)


def max_segments(t: TreeTemplate, worst: Sizes, rows: int) -> int:
    """The most segments one instance (or a split piece of one) of at most `rows` rows can have, at least 1.

    Sound: the runtime binds an instance from this very template (dedup_prefixes' output, which the program
    IR holds), one segment per template segment it instantiates, dropping those that bind to no tokens; a
    kept segment holds every constant id of its template, so at least const_tokens rows. The root is there
    once with at least `root_least` rows (a root without constant ids may be dropped: then root_least is 0
    and the bound is loose by one) and every other segment has at least `least`, the fewest over the
    non-root templates, so n segments need root_least + (n - 1) * least <= rows. Reached when the smallest
    segment may repeat that often with its slots empty. `least` == 0 (a segment of slots only) bounds
    nothing beyond a row per segment. Monotone in `rows`: a bucket with more rows never holds fewer
    segments, so a single instance lands where its rows alone say, and the largest bucket holds at most
    worst.segments. Instances packed in one stream bring a root each, so they may need a larger bucket
    than their rows pick (TreeProgram.bucket_for checks every bound)."""
    (root, _), *rest = segments_preorder(t.root)
    root_least = const_tokens(root)
    least = min((const_tokens(s) for s, _ in rest), default=0)  # no other segment: worst.segments is 1
    bound = min(worst.segments, rows)
    if least:
        bound = min(bound, 1 + (rows - root_least) // least)
    return max(1, bound)


def _within(p: Sizes, worst: Sizes) -> bool:
    return (p.rows <= worst.rows and p.segments <= worst.segments and p.depth <= worst.depth
            and p.reads <= worst.reads and p.labels <= worst.labels)


def _cover(sizes: list[int], padding: float, most: int) -> list[int]:
    """The fewest 64-row buckets, none over `most`, such that each size's smallest fitting bucket pads it
    by at most `padding` of its rows (or by less than 64 rows, where rounding allows nothing better)."""
    rows: list[int] = []
    for n in sizes:
        if rows and n <= rows[-1]:
            continue
        # the largest bucket that still pads n by at most `padding`; never below n itself
        top = int(n / (1 - padding)) // ROW_ALIGN * ROW_ALIGN
        rows.append(min(max(round_rows(n), top), most))
    return rows


def _ladder(least: int, most: int) -> list[int]:
    """round_rows(least), each 2^k and 3 * 2^k row count (multiples of 64) between, round_rows(most)."""
    low, high = round_rows(least), round_rows(most)
    steps, k = [], ROW_ALIGN
    while k < high:
        steps += [k, 3 * k // 2] if k > ROW_ALIGN else [k]
        k *= 2
    return [low] + [r for r in steps if low < r < high] + ([high] if high > low else [])

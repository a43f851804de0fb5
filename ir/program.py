"""The program IR: what one compiled bucket is, independent of any request's text.

A bucket is one static shape the runtime binds instances into: at most `rows` stream tokens, `segments`
segments, paths `depth` segments deep, `reads` reads of at most `labels` labels each. Every buffer, grid and
table of a recording is sized from these numbers, so a request that fits is bound without compiling; padding
rows, segments and reads are inert. Produced by the bucketing pass, consumed by codegen and the runtime.
Around it: a tree's ladder of buckets with their padding and stream layouts (passes/bucket_topologies.py,
passes/layout.py) and the template the buckets were sized from; printed and parsed by ./program_printer.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from flidec.ir.template import Sizes, Templates, TreeTemplate, segments_preorder, verify_templates

ROW_ALIGN = 64  # bucket rows are whole 64-row tiles: the GDN chunk and the kernels' row tiles


@dataclass(frozen=True, slots=True)
class Bucket:
    name: str
    rows: int
    segments: int
    depth: int
    reads: int
    labels: int

    def fits(self, rows: int, segments: int, depth: int, reads: int, labels: int) -> bool:
        return (rows <= self.rows and segments <= self.segments and depth <= self.depth
                and reads <= self.reads and labels <= self.labels)


@dataclass(frozen=True, slots=True)
class Layout:
    """A bucket's stream layout: template segments (pre-order ids, ir/template.segments_preorder) in stream
    order, level by level so that each tree level's rows are contiguous (the recurrent layers run a level's
    segments as one batch once their parents are done), and the most rows each level takes in the bucket."""

    order: tuple[int, ...]
    level_rows: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Rung:
    """A rung of a tree's bucket ladder: a bucket and its worst-case padding (the largest fraction of its
    rows left empty by an instance that lands in it, the smallest bucket that fits, over the profile or,
    without one, the bounds)."""

    bucket: Bucket
    padding: float
    layout: Layout | None = None


@dataclass(frozen=True, slots=True)
class TreeProgram:
    """One tree compiled: its (deduplicated) template, its worst case within the declared bounds, its
    bucket ladder (smallest first) and the basis of the padding figures ("profile" or "bounds"). An
    instance that fits no bucket (more rows than the largest) takes the eager/split path."""

    template: TreeTemplate
    worst: Sizes
    buckets: tuple[Rung, ...]
    basis: str

    @property
    def name(self) -> str:
        return self.template.tree

    @property
    def largest(self) -> Bucket:
        return self.buckets[-1].bucket

    def bucket_for(self, need: Sizes) -> Bucket | None:
        """The smallest bucket `need` fits, or None: the eager/split path."""
        for plan in self.buckets:
            b = plan.bucket
            if b.fits(need.rows, need.segments, need.depth, need.reads, need.labels):
                return b
        return None


@dataclass(frozen=True, slots=True)
class ProgramIR:
    """Every tree of a spec compiled; `padding`: the stated worst-case padding the ladders were built for."""

    trees: tuple[TreeProgram, ...]
    padding: float


def verify_program(program: ProgramIR) -> list[str]:
    """Structural problems: ladders out of order, rows off the 64-row grid, layouts that are not a
    level-by-level permutation of the template's segments, padding out of [0, 1)."""
    problems = list(verify_templates(Templates(tuple(t.template for t in program.trees))))
    for t in program.trees:
        where = f"tree {t.name}"
        if not t.buckets:
            problems.append(f"{where}: no buckets")
        rows = [p.bucket.rows for p in t.buckets]
        if rows != sorted(set(rows)):
            problems.append(f"{where}: bucket rows must increase: {rows}")
        levels = [level for _, level in segments_preorder(t.template.root)]
        for p in t.buckets:
            b = p.bucket
            if b.rows % ROW_ALIGN or b.rows <= 0:
                problems.append(f"{where}: bucket {b.name} has {b.rows} rows, not a positive multiple of "
                                f"{ROW_ALIGN}")
            if not 0 <= p.padding < 1:
                problems.append(f"{where}: bucket {b.name} padding {p.padding} is not in [0, 1)")
            if p.layout is None:
                continue
            order = p.layout.order
            if sorted(order) != list(range(len(levels))):
                problems.append(f"{where}: bucket {b.name}'s layout is not a permutation of the "
                                f"{len(levels)} template segments")
            elif [levels[i] for i in order] != sorted(levels):
                problems.append(f"{where}: bucket {b.name}'s layout does not keep each level contiguous")
            if len(p.layout.level_rows) != 1 + max(levels):
                problems.append(f"{where}: bucket {b.name}'s layout has {len(p.layout.level_rows)} levels, "
                                f"the template {1 + max(levels)}")
    return problems

"""The program IR: what one compiled bucket is, independent of any request's text.

A bucket is one static shape the runtime binds instances into: at most `rows` stream tokens, `segments`
segments, paths `depth` segments deep, `reads` reads of at most `labels` labels each. Every buffer, grid and
table of a recording is sized from these numbers, so a request that fits is bound without compiling; padding
rows, segments and reads are inert. Produced by the bucketing pass, consumed by codegen and the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass


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

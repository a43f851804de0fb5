"""The compile context: what passes and build stages read besides their IR, as one typed, frozen value.

Built once by flidec/compile.py (tests build their own) and passed unchanged to every pass of a pipeline;
passes read its declared fields and never write it. The tree passes read the format, the profile, the
padding and the largest bucket; the build stages (codegen/record_buckets.py, compile_kernels.py,
write_artifact.py) the target, the lowered model graph and what the artifact writer needs. Defaults describe
a cpu compile without hints, so a test sets only the fields its passes read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch.fx

from flidec.ir.template import Sizes
from flidec.ir.tree import Spec
from flidec.runtime.decision.format import DecisionFormat
from flidec.runtime.decision.reading import DecisionReading
from flidec.runtime.next_token import NextTokenFormat

PADDING = 0.25  # the stated worst-case padding of a bucket ladder
MAX_ROWS = 65536  # the largest bucket a ladder without hints goes to


@dataclass(frozen=True, slots=True)
class CompileContext:
    """The tree passes' inputs (format with the model's tokenizer, a profile of instance sizes per tree name,
    the stated padding, the largest bucket without hints), then the build stages': the target, the model
    graph lowered by GRAPH_PIPELINE (None for cpu, whose artifact has no recordings), the kernel cache, and
    the spec, its source, the model directory and the directory the artifact is written into."""

    fmt: NextTokenFormat | DecisionReading | None = None
    profile: Mapping[str, Sequence[Sizes]] = field(default_factory=dict)
    padding: float = PADDING
    max_rows: int = MAX_ROWS
    target: str = "cpu"
    graph: torch.fx.GraphModule | None = None
    kernel_cache: Path | None = None
    spec: Spec | None = None
    spec_source: bytes = b""
    model_dir: Path | None = None
    bundle_weights: bool = False
    out: Path | None = None
    activations: str | None = None  # a GPU target's --activations (flidec/compile.py ACTIVATIONS)
    decision: DecisionFormat | None = None  # the checkpoint's decision format (None: fmt is next_token)
    head: Mapping[str, torch.Tensor] | None = None  # its readout head's "weight" (and "bias"), fp32

"""What the harness asks of an engine, and what every engine shares.

An engine loads a model directory onto a device, prepares a Work (untimed: plans, label rows), then runs
the reads of a list of instances and returns each read's label logits: {read index: 1-D float32 CPU
tensor, one logit per label}. `offline=True` is throughput mode (everything at once, as the engine batches
best); `offline=False` is one request at a time (the harness passes one instance). Returning CPU tensors
is the synchronization point: a run is done when its logits are on the host. `computes` says which tokens
the engine computes, for FLOPs: "tree" (every segment once), "one-level" (the state once, then each
question's whole rest), or "solo" (every prompt whole). A failure is an exception; the harness turns it
into an error row. EngineUnavailable says the engine cannot run here at all (not installed, no GPU). An engine
that compiles ahead of time (flidec) has `build(model_dir, works, device)`, called before `load` is timed; its
facts (compile seconds) are reported apart. An engine that compiles while it runs, for every new input shape
(flide), sets `compiles_per_shape = True`: benchmarks/measure.py then runs each call it times once untimed
first (the shape warm-up; measure.py says when a cell is marked `compiling` instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import torch

from benchmarks.work import Work

Logits = dict[int, torch.Tensor]


class EngineUnavailable(RuntimeError):
    """The engine cannot run in this environment; its cells become error rows with this message."""


class Engine(Protocol):
    name: str
    computes: str  # "tree" | "one-level" | "solo"

    def load(self, model_dir: Path, device: str) -> dict: ...  # returns facts for the report

    def prepare(self, work: Work) -> object: ...

    def run(self, prepared: object, instances: Sequence[int], offline: bool) -> Logits: ...

    def close(self) -> None: ...


def head_weight(model_dir: Path) -> torch.Tensor:
    """The output head [vocab, hidden] as stored (tied checkpoints: the embedding), read with safetensors."""
    import json

    from safetensors import safe_open

    from flidec.models.config import TextConfig

    cfg = TextConfig.from_dir(model_dir)
    prefix = "model.language_model." if cfg.nested else "model."
    name = f"{prefix}embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
    index = model_dir / "model.safetensors.index.json"
    file = model_dir / (
        json.loads(index.read_text())["weight_map"][name] if index.is_file() else "model.safetensors"
    )
    with safe_open(str(file), framework="pt") as f:
        return f.get_tensor(name)


def label_logits(hidden: torch.Tensor, head_rows: torch.Tensor) -> torch.Tensor:
    """fp32 logits of some label rows [L, H] for one final-normed hidden state [H] (E4: float32 head)."""
    return head_rows.float() @ hidden.float()


def free_device_memory() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()

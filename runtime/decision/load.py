"""An artifact's decision format, read back: format.json and its readout head, for the runtime.

Consumes an artifact directory whose files the manifest already vouched for (runtime/artifact.py); produces
the DecisionReading the Program binds and answers with (None for an artifact that reads next_token) and the
readout head's tensors (fp32 "weight" and "bias"), or ArtifactError naming what is wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from flidec.ir.errors import ArtifactError
from flidec.models.tokenizer import load_tokenizer
from flidec.runtime.decision.format import HEAD_FILE, DecisionFormat
from flidec.runtime.decision.reading import DecisionReading


def load_head(directory: Path, fmt: DecisionFormat) -> dict[str, torch.Tensor] | None:
    """The readout head's tensors, checked against the format (None: the output head)."""
    if fmt.head.kind != "readout":
        return None
    try:
        tensors = load_file(str(directory / HEAD_FILE))
    except (OSError, SafetensorError) as e:
        raise ArtifactError(f"{directory}/{HEAD_FILE}: cannot be read ({e})") from None
    want = {"weight", "bias"} if fmt.head.bias else {"weight"}
    if set(tensors) != want:
        raise ArtifactError(
            f"{directory}/{HEAD_FILE}: holds {sorted(tensors)}, the format needs {sorted(want)}"
        )
    w = tensors["weight"]
    if w.dim() != 2 or w.shape[0] != fmt.head.rows or w.dtype != torch.float32:
        raise ArtifactError(
            f"{directory}/{HEAD_FILE}: weight {list(w.shape)} {w.dtype}, the format needs "
            f"[{fmt.head.rows}, hidden] float32"
        )
    if fmt.head.bias and list(tensors["bias"].shape) != [fmt.head.rows]:
        raise ArtifactError(f"{directory}/{HEAD_FILE}: bias {list(tensors['bias'].shape)}, one value a row")
    return tensors


def load_reading(directory: Path) -> tuple[DecisionReading, dict[str, torch.Tensor] | None] | None:
    """The artifact's DecisionReading over its tokenizer and its readout head's tensors (None: the output
    head), or None when it has no format.json."""
    path = Path(directory) / "format.json"
    if not path.is_file():
        return None
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: not readable JSON ({e})") from None
    fmt = DecisionFormat.from_json(obj, str(path))
    head = load_head(Path(directory), fmt)
    bias = head["bias"].double().tolist() if head is not None and "bias" in head else None
    return DecisionReading(fmt, load_tokenizer(Path(directory) / "tokenizer"), bias), head

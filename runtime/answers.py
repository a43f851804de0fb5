"""Answers per instance from a bound stream's label logits.

Consumes a BoundStream (runtime.binder) and the label logits of its reads ([R, Lmax] float32, read order, the
first len(labels) entries of each row meaningful); produces, per instance in input order, its answers in
the shape of the instance: {ask: answer, fork: [branch answers...], repeated ask: {id: answer}}, or, for a
wire="systemone" tree, a System One response. The answer objects themselves come from the format.
"""

from __future__ import annotations

import torch

from flidec.runtime.binder import BoundStream, Shape


def _fill(shape: Shape, answers: list[dict]) -> object:
    if isinstance(shape, int):
        return answers[shape]
    if isinstance(shape, dict):
        return {k: _fill(v, answers) for k, v in shape.items()}
    return [_fill(v, answers) for v in shape]  # type: ignore[attr-defined]


def assemble(bound: BoundStream, label_logits: torch.Tensor, *,
             served_name: str | None = None) -> list[dict | None]:
    """One answer object per instance given to bind, None where it failed (see bound.errors).

    System One responses report `served_name` as the model and, as usage.input_tokens, the sum over the
    request's questions of each question's whole prompt length in tokens (chat template included): what a
    server reading one prompt per question counts, independent of how flidec shares the state."""
    if label_logits.dim() != 2 or label_logits.shape[0] != len(bound.sites):
        raise ValueError(f"expected label logits [{len(bound.sites)}, Lmax], got {list(label_logits.shape)}")
    if bound.wire == "systemone" and served_name is None:
        raise ValueError("a systemone tree's responses need the served model name")
    rows = label_logits.float().tolist()
    per_read = [bound.fmt.answer(site.piece, row[: len(site.piece.labels)])
                for site, row in zip(bound.sites, rows, strict=True)]
    # a shape's leaves index its own instance's reads (bind plans each instance alone); the stream holds
    # each instance's reads contiguously, in plan order
    own: dict[int, list[dict]] = {}
    for site, answer in zip(bound.sites, per_read, strict=True):
        own.setdefault(site.instance, []).append(answer)
    out: list[dict | None] = []
    for i, shape in enumerate(bound.shapes):
        if shape is None:
            out.append(None)
            continue
        filled = _fill(shape, own.get(i, []))
        if bound.wire == "systemone":
            (questions,) = filled.values()  # type: ignore[union-attr]  # a systemone tree asks one repeated ask
            filled = {"model": served_name, "answers": questions,
                      "usage": {"input_tokens": bound.input_tokens[i], "output_tokens": 0}}
        out.append(filled)  # type: ignore[arg-type]
    return out

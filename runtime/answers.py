"""Answers per instance from a bound stream's label logits.

Consumes a BoundStream (runtime.binder), or one instance's shape and reads, and the label logits of its reads
([R, Lmax] float32, read order, the first len(labels) entries of each row meaningful); produces, per instance
in input order, its answers in the shape of the instance: {ask: answer, fork: [branch answers...], repeated
ask: {id: answer}}, or, for a wire="systemone" tree, a System One response.
The answer objects themselves come from the format.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from flidec.runtime.binder import AskPieceLike, BindFormat, BoundStream, Shape


def _fill(shape: Shape, answers: list[dict]) -> object:
    if isinstance(shape, int):
        return answers[shape]
    if isinstance(shape, dict):
        return {k: _fill(v, answers) for k, v in shape.items()}
    return [_fill(v, answers) for v in shape]  # type: ignore[attr-defined]


def assemble(bound: BoundStream, label_logits: torch.Tensor, *,
             served_name: str | None = None) -> list[dict | None]:
    """One answer object per instance given to bind, None where it failed (see bound.errors)."""
    if label_logits.dim() != 2 or label_logits.shape[0] != len(bound.sites):
        raise ValueError(f"expected label logits [{len(bound.sites)}, Lmax], got {list(label_logits.shape)}")
    # the stream holds each instance's reads contiguously, in plan order
    own: dict[int, list[int]] = {}
    for r, site in enumerate(bound.sites):
        own.setdefault(site.instance, []).append(r)
    out: list[dict | None] = []
    for i, shape in enumerate(bound.shapes):
        rows = own.get(i, [])
        out.append(None if shape is None else answer_instance(
            shape, [bound.sites[r].piece for r in rows], label_logits[rows], bound.fmt, bound.wire,
            bound.input_tokens[i], served_name))
    return out


def answer_instance(shape: Shape, pieces: Sequence[AskPieceLike], label_logits: torch.Tensor,
                    fmt: BindFormat, wire: str | None, input_tokens: int,
                    served_name: str | None = None) -> dict:
    """One instance's answer object from the label logits of its reads, in its plan order (a row per piece).

    System One responses report `served_name` as the model and, as usage.input_tokens, the sum over the
    request's questions of each question's whole prompt length in tokens (chat template included): what a
    server reading one prompt per question counts, independent of how flidec shares the state."""
    if wire == "systemone" and served_name is None:
        raise ValueError("a systemone tree's responses need the served model name")
    rows = label_logits.float().tolist()
    answers = [fmt.answer(piece, row[: len(piece.labels)]) for piece, row in zip(pieces, rows, strict=True)]
    filled = _fill(shape, answers)  # a shape's leaves index the instance's own reads
    if wire == "systemone":
        (questions,) = filled.values()  # type: ignore[union-attr]  # a systemone tree asks one repeated ask
        return {"model": served_name, "answers": questions,
                "usage": {"input_tokens": input_tokens, "output_tokens": 0}}
    return filled  # type: ignore[return-value]

"""Formats: how a model is asked and read. `resolve_format` picks, for a spec and a checkpoint, the generic
next_token reading (`format next_token(style="vllm")`, runtime/next_token.py) or the checkpoint's own decision
format (runtime/decision, docs/FORMATS.md): `flidec compile --format FILE`, else the checkpoint's
decision_config.json when it declares flide-template-v1, else the spec's format line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from flidec.formats.template_v1 import FORMAT_ID, FormatError, read_template
from flidec.ir.errors import Diagnostic, SpecError
from flidec.ir.tree import Format
from flidec.runtime.decision.format import DecisionFormat
from flidec.runtime.decision.reading import DecisionReading
from flidec.runtime.next_token import ChatTokenizer, NextTokenFormat

FORMATS = {"next_token": NextTokenFormat}
OPTIONS = {"next_token": {"style": ("vllm",)}}  # option -> allowed values; the first is the default
DECISION_CONFIG = "decision_config.json"


def make_format(spec: Format, tokenizer: ChatTokenizer) -> NextTokenFormat:
    if spec.name not in FORMATS:
        raise SpecError(
            [
                Diagnostic(
                    spec.loc,
                    f"unknown format `{spec.name}`",
                    hint=f"known formats: {', '.join(sorted(FORMATS))}",
                )
            ]
        )
    allowed = OPTIONS[spec.name]
    for key, value in spec.options:
        if key not in allowed:
            raise SpecError([Diagnostic(spec.loc, f"format `{spec.name}` has no option `{key}`")])
        if value not in allowed[key]:
            raise SpecError(
                [
                    Diagnostic(
                        spec.loc,
                        f"format `{spec.name}`: {key}={value!r} is not supported",
                        hint=f"supported: {', '.join(map(repr, allowed[key]))}",
                    )
                ]
            )
    return FORMATS[spec.name](tokenizer)


@dataclass(frozen=True)
class Resolved:
    """The format a compile (or `flidec run SPEC`) reads the model with. `decision`: the checkpoint's own
    format (None: next_token); `head`: its readout head's tensors; `note`: what to tell the user about it."""

    fmt: NextTokenFormat | DecisionReading
    decision: DecisionFormat | None = None
    head: dict[str, torch.Tensor] | None = None  # a readout head: "weight" [rows, hidden] and "bias", fp32
    note: str | None = None


def resolve_format(
    spec: Format, model_dir: Path, tokenizer, choice: str | None = None, model_id: str | None = None
) -> Resolved:
    """`choice`: --format's value (a flide-template-v1 JSON file, or "next_token"); `model_id`: --model as
    given (a hub id is matched against a format's `match.repos`)."""
    generic = Format("next_token", (("style", "vllm"),))
    if choice == "next_token":
        return Resolved(make_format(spec if spec.name == "next_token" else generic, tokenizer))
    if choice is not None:
        path = Path(choice)
        if not path.is_file():
            raise FormatError(
                f"--format {choice}: no such file (a flide-template-v1 JSON file, or next_token)"
            )
        return _decision(
            _load_json(path, f"--format {choice}"),
            model_dir,
            tokenizer,
            path.name,
            model_id,
            spec,
            f"read with --format {path.name}",
        )
    dc_path = model_dir / DECISION_CONFIG
    if dc_path.is_file():
        dc = _load_json(dc_path, str(dc_path))
        if isinstance(dc, dict) and dc.get("format_id") == FORMAT_ID:
            return _decision(
                dc,
                model_dir,
                tokenizer,
                DECISION_CONFIG,
                model_id,
                spec,
                f"read as its {DECISION_CONFIG} defines ({FORMAT_ID})",
            )
        raise FormatError(
            f"{dc_path}: this checkpoint ships its own decision_config.json, which does not declare "
            f'"format_id": "{FORMAT_ID}", so flidec cannot tell how its release reads it; describe it in a '
            f"{FORMAT_ID} file and pass --format FILE (docs/FORMATS.md), or pass --format next_token to "
            "read it as a plain chat model"
        )
    if spec.name == "decision":
        raise SpecError(
            [
                Diagnostic(
                    spec.loc,
                    f"format decision: {model_dir} has no {DECISION_CONFIG}",
                    hint="pass flidec compile --format FILE (a flide-template-v1 description, "
                    'docs/FORMATS.md), or write format next_token(style="vllm")',
                )
            ]
        )
    return Resolved(make_format(spec, tokenizer))


def _decision(
    config: object, model_dir: Path, tokenizer, source: str, model_id: str | None, spec: Format, how: str
) -> Resolved:
    if not isinstance(config, dict):
        raise FormatError(f"{source}: a decision format is a JSON object")
    fmt, head_file = read_template(config, model_dir, tokenizer, source=source, model_id=model_id)
    head = None
    if head_file is not None:  # read_template checked the tensors' names and shapes
        tensors = load_file(str(head_file))
        head = {"weight": tensors[str(config.get("head_key", "weight"))].float()}
        if fmt.head.bias:
            head["bias"] = tensors[str(config["head_bias"])].float()
    note = f"the model is {how}"
    if spec.name == "next_token":
        note += "; the spec's `format next_token` is not used (--format next_token keeps it)"
    bias = head["bias"].double().tolist() if head and "bias" in head else None
    reading = DecisionReading(fmt, tokenizer, bias)
    tokens, after = reading.sharing()
    if not after:
        note += (
            f"; its prompt puts text that depends on the question before the state, so questions share "
            f"only {tokens} tokens and the state is computed once per question (flidec inspect OUT)"
        )
    return Resolved(reading, fmt, head, note)


def _load_json(path: Path, where: str) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise FormatError(f"{where}: not a readable JSON file ({e})") from None

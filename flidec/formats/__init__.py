"""Formats: how a model family renders prompts and reads answers. The registry maps a spec's format name
to its class and checks the spec's options (`format next_token(style="vllm")`)."""

from __future__ import annotations

from flidec.ir.errors import Diagnostic, SpecError
from flidec.ir.tree import Format
from flidec.runtime.next_token import ChatTokenizer, NextTokenFormat

FORMATS = {"next_token": NextTokenFormat}
OPTIONS = {"next_token": {"style": ("vllm",)}}  # option -> allowed values; the first is the default


def make_format(spec: Format, tokenizer: ChatTokenizer) -> NextTokenFormat:
    if spec.name not in FORMATS:
        raise SpecError([Diagnostic(spec.loc, f"unknown format `{spec.name}`",
                                    hint=f"known formats: {', '.join(sorted(FORMATS))}")])
    allowed = OPTIONS[spec.name]
    for key, value in spec.options:
        if key not in allowed:
            raise SpecError([Diagnostic(spec.loc, f"format `{spec.name}` has no option `{key}`")])
        if value not in allowed[key]:
            raise SpecError([Diagnostic(spec.loc, f"format `{spec.name}`: {key}={value!r} is not supported",
                                        hint=f"supported: {', '.join(map(repr, allowed[key]))}")])
    return FORMATS[spec.name](tokenizer)

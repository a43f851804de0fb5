"""A decision format's prompts as text: one request's questions rendered through the format's Jinja templates.

Consumes a DecisionFormat and the checkpoint's tokenizer (its chat template and its encoder, for the state's
token budget); produces, per question, the whole prompt text with BOUNDARY marks where the format asks for
a cut (`boundary()`), the chat template applied when the format has messages. Template variables, filters,
tests and functions are the flide-template-v1 schema's (docs/FORMATS.md): state, state_text, question,
options, questions; describe, text, json; matching; refuse(), boundary(), labels_for(). A template's
`refuse(message)` raises Refusal, which the reading turns into the request's error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from flidec.runtime.decision.format import DecisionFormat

BOUNDARY = "\x00flidec:boundary\x00"  # NUL never comes from a JSON request's text, so no text can forge it


class Refusal(ValueError):
    """The format turns this request down (its template's refuse(), or a limit of the format)."""


class RenderTokenizer(Protocol):
    def encode_template(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str: ...

    def render_chat(self, messages: list[dict], *, thinking: bool) -> str: ...


@dataclass(frozen=True, slots=True)
class Question:
    """One question as the templates see it (`question` and each entry of `questions`) and its options in
    prompt order: (key, description)."""

    key: str
    kind: str
    instructions: Any
    criteria: Any
    given: tuple[str, ...]
    options: tuple[tuple[str, Any], ...]

    def view(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "type": self.kind,
            "instructions": self.instructions,
            "criteria": self.criteria,
            "given": list(self.given),
        }


def describe(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _json(value: Any, indent: int | None = None, compact: bool = False) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=(",", ":") if compact else None)


def _refuse(message: Any) -> None:
    raise Refusal(str(message))


def _matching(value: Any, pattern: str) -> bool:
    return isinstance(value, str) and re.search(pattern, value) is not None


class Renderer:
    """The format's templates, compiled once; `prompt` renders one question's whole prompt."""

    def __init__(self, fmt: DecisionFormat, tokenizer: RenderTokenizer):
        self.fmt, self.tok = fmt, tokenizer
        env = ImmutableSandboxedEnvironment(keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
        env.filters.update(describe=describe, text=_text, json=_json)
        env.tests["matching"] = _matching
        env.globals.update(refuse=_refuse, boundary=lambda: BOUNDARY, labels_for=self._labels_for)
        self.messages = [(role, env.from_string(content)) for role, content in fmt.messages]
        self.whole = env.from_string(fmt.prompt) if fmt.prompt is not None else None
        self.state_template = env.from_string(fmt.state.text) if fmt.state is not None else None

    def _labels_for(self, kind: str, n: int) -> list[str]:
        try:
            return list(self.fmt.labels_for(kind, int(n)))
        except (ValueError, KeyError) as e:
            raise Refusal(f"labels_for({kind!r}, {n!r}): {e}") from None

    def state_text(self, state: Any, budget: int | None) -> tuple[str, int]:
        """The state as the prompt shows it, within `budget` tokens (None: the format's own budget), and how
        many tokens it had before the cut."""
        cut = self.fmt.state
        assert cut is not None and self.state_template is not None
        text = self._render(self.state_template, {"state": state})
        ids = self.tok.encode_template(text)
        budget = cut.max_tokens if budget is None else budget
        if len(ids) <= budget:
            return text, len(ids)
        side = cut.side(state)
        before, after = cut.marks.get(side, ("", ""))
        kept = ids[len(ids) - budget :] if side == "tail" else ids[:budget]
        return before + self.tok.decode(kept) + after, len(ids)

    def prompt(
        self,
        state: Any,
        state_text: str | None,
        question: Question,
        labels: Sequence[str],
        questions: Sequence[Question],
    ) -> str:
        """One question's whole prompt, BOUNDARY marks included."""
        ctx = {
            "state": state,
            "state_text": state_text,
            "question": question.view(),
            "questions": [q.view() for q in questions],
            "options": [
                {"label": label, "key": key, "description": desc, "index": i}
                for i, (label, (key, desc)) in enumerate(zip(labels, question.options, strict=True))
            ],
        }
        if self.whole is not None:
            return self._render(self.whole, ctx)
        messages = [{"role": role, "content": self._render(t, ctx)} for role, t in self.messages]
        return self.tok.render_chat(messages, thinking=self.fmt.thinking) + self.fmt.reply

    @staticmethod
    def _render(template: jinja2.Template, ctx: Mapping[str, Any]) -> str:
        try:
            return template.render(**ctx)
        except Refusal:
            raise
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, AttributeError) as e:
            raise Refusal(f"the format's template failed on this request: {type(e).__name__}: {e}") from None

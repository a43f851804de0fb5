"""DecisionFormat: the typed description of how a decision checkpoint is asked and read (format.json).

Produced at compile time (flidec/formats/template_v1.py resolves a checkpoint's decision_config.json: its
`@file#key` references read, its labels turned into head rows); written to the artifact as format.json
(`to_json`) and read back by the runtime (`from_json`, which refuses a malformed description naming the
field). Everything here is resolved: templates as text, labels with the head rows they read, temperatures
as (a, b) with log T = a + b ln n. docs/FORMATS.md describes every field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flidec.ir.errors import ArtifactError
from flidec.runtime.decision.fields import Fields

KINDS = ("choice", "noul", "score")
SIDES = ("head", "tail")
HEADS = ("output", "readout")
VERSION = 1  # format.json's own version
HEAD_FILE = "format/readout.safetensors"  # a readout head in the artifact: "weight" and "bias", fp32


@dataclass(frozen=True, slots=True)
class StateCut:
    """The state as the prompt shows it (`state_text`), cut to a token budget: `text` renders it from the
    state; over `max_tokens` tokens it keeps the first ("head") or last ("tail") of them, by the state's
    shape (`keep`: "list" for a JSON array, "default" for the rest), between the side's `marks`; while a
    prompt is over the format's max_prompt_tokens the budget shrinks by the excess plus `slack`, at most
    `tries` times, never below `min_tokens`."""

    text: str
    max_tokens: int
    min_tokens: int = 0
    keep: Mapping[str, str] = field(default_factory=lambda: {"default": "head"})
    marks: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    slack: int = 0
    tries: int = 1

    def side(self, state: object) -> str:
        return self.keep.get("list" if isinstance(state, list) else "default", self.keep["default"])


@dataclass(frozen=True, slots=True)
class Tier:
    """Labels for questions of at most `upto` options (None: any count)."""

    upto: int | None
    labels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Temperature:
    """log T = a + b ln n, n the question's option count (b = 0: one T for every count)."""

    a: float
    b: float = 0.0

    def at(self, n: int) -> float:
        return math.exp(self.a + self.b * math.log(n))


@dataclass(frozen=True, slots=True)
class Head:
    """What the read rows meet: the output head's label rows ("output", soft-capped when `softcap`), or the
    artifact's readout rows ("readout": `file` holds `weight` [rows, hidden] and, with `bias`, `bias`
    [rows]). A question's probabilities are normalized over its own labels only."""

    kind: str = "output"
    file: str | None = None
    rows: int = 0
    softcap: float | None = None
    bias: bool = False


@dataclass(frozen=True)
class DecisionFormat:
    """One checkpoint's reading. `messages` (role, Jinja content) go through the chat template (`thinking`
    on or off, `reply` appended); or `prompt` is the whole prompt. `labels`: per question type, its tiers;
    `rows`: per label, the head rows it reads (several forms are combined by log-sum-exp)."""

    source: str
    messages: tuple[tuple[str, str], ...]
    prompt: str | None
    reply: str
    thinking: bool
    state: StateCut | None
    labels: Mapping[str, tuple[Tier, ...]]
    rows: Mapping[str, tuple[int, ...]]
    head: Head
    temperature: Mapping[str, Temperature]
    noul: tuple[str, str] = ("false", "true")
    noul_text: Mapping[str, str] = field(default_factory=dict)
    types: tuple[str, ...] = KINDS
    max_options: int = 255
    max_prompt_tokens: int = 32768

    def labels_for(self, kind: str, n: int) -> tuple[str, ...]:
        """The labels a question of `kind` with `n` options reads; ValueError when it has too few."""
        for tier in self.labels[kind]:
            if tier.upto is None or n <= tier.upto:
                if n <= len(tier.labels):
                    return tier.labels[:n]
                break
        raise ValueError(
            f"{n} options: this model's format has labels for at most {self.most_options(kind)} in a {kind}"
        )

    def most_options(self, kind: str) -> int:
        """The most options a question of `kind` can have (its labels and max_options)."""
        most = max((min(len(t.labels), t.upto or len(t.labels)) for t in self.labels[kind]), default=0)
        return min(most, self.max_options)

    # -- format.json ---------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "source": self.source,
            "messages": [list(m) for m in self.messages],
            "prompt": self.prompt,
            "reply": self.reply,
            "thinking": self.thinking,
            "state": None
            if self.state is None
            else {
                "text": self.state.text,
                "max_tokens": self.state.max_tokens,
                "min_tokens": self.state.min_tokens,
                "keep": dict(self.state.keep),
                "marks": {k: list(v) for k, v in self.state.marks.items()},
                "slack": self.state.slack,
                "tries": self.state.tries,
            },
            "labels": {
                k: [{"upto": t.upto, "labels": list(t.labels)} for t in tiers]
                for k, tiers in self.labels.items()
            },
            "rows": {label: list(rows) for label, rows in self.rows.items()},
            "head": {
                "kind": self.head.kind,
                "file": self.head.file,
                "rows": self.head.rows,
                "softcap": self.head.softcap,
                "bias": self.head.bias,
            },
            "temperature": {k: [t.a, t.b] for k, t in self.temperature.items()},
            "noul": list(self.noul),
            "noul_text": dict(self.noul_text),
            "types": list(self.types),
            "max_options": self.max_options,
            "max_prompt_tokens": self.max_prompt_tokens,
        }

    @classmethod
    def from_json(cls, obj: Any, where: str = "format.json") -> DecisionFormat:
        """The description `to_json` wrote; ArtifactError naming the field when it is not one."""
        r = Fields(where, ArtifactError)
        o = r.exact(
            obj,
            "",
            {
                "version",
                "source",
                "messages",
                "prompt",
                "reply",
                "thinking",
                "state",
                "labels",
                "rows",
                "head",
                "temperature",
                "noul",
                "noul_text",
                "types",
                "max_options",
                "max_prompt_tokens",
            },
        )
        if o["version"] != VERSION:
            r.fail("version", f"is {o['version']!r}; this runtime reads version {VERSION}")
        pairs = [r.list(m, f"messages[{i}]", 2) for i, m in enumerate(r.list(o["messages"], "messages"))]
        messages = tuple(
            (r.str(m[0], f"messages[{i}][0]"), r.str(m[1], f"messages[{i}][1]")) for i, m in enumerate(pairs)
        )
        prompt = r.opt(o["prompt"], "prompt", r.str)
        if (prompt is None) == (not messages):
            r.fail("messages", "a format has either messages or a prompt")
        st = o["state"]
        state = None
        if st is not None:
            s = r.exact(st, "state", {"text", "max_tokens", "min_tokens", "keep", "marks", "slack", "tries"})
            keep = {
                k: r.one_of(v, f"state.keep.{k}", SIDES) for k, v in r.dict(s["keep"], "state.keep").items()
            }
            if "default" not in keep or not set(keep) <= {"list", "default"}:
                r.fail("state.keep", "must name a side for `default` (and may for `list`)")
            marks = {}
            for k, v in r.dict(s["marks"], "state.marks").items():
                r.one_of(k, f"state.marks.{k}", SIDES)
                pair = r.list(v, f"state.marks.{k}", 2)
                marks[k] = (r.str(pair[0], f"state.marks.{k}[0]"), r.str(pair[1], f"state.marks.{k}[1]"))
            state = StateCut(
                r.str(s["text"], "state.text"),
                r.int(s["max_tokens"], "state.max_tokens", 1),
                r.int(s["min_tokens"], "state.min_tokens", 0),
                keep,
                marks,
                r.int(s["slack"], "state.slack", 0),
                r.int(s["tries"], "state.tries", 1),
            )
        labels = {}
        for kind in KINDS:
            tiers = r.list(r.dict(o["labels"], "labels").get(kind), f"labels.{kind}")
            labels[kind] = tuple(
                Tier(
                    r.opt(
                        t.get("upto") if isinstance(t, dict) else None,
                        f"labels.{kind}[{i}].upto",
                        lambda v, w: r.int(v, w, 1),
                    ),
                    tuple(
                        r.str(x, f"labels.{kind}[{i}].labels")
                        for x in r.list(
                            r.dict(t, f"labels.{kind}[{i}]").get("labels"), f"labels.{kind}[{i}].labels"
                        )
                    ),
                )
                for i, t in enumerate(tiers)
            )
        rows = {
            label: tuple(r.int(x, f"rows.{label}", 0) for x in r.list(v, f"rows.{label}"))
            for label, v in r.dict(o["rows"], "rows").items()
        }
        for kind, tiers in labels.items():
            for t in tiers:
                missing = [x for x in t.labels if not rows.get(x)]
                if missing:
                    r.fail(f"labels.{kind}", f"label {missing[0]!r} has no head rows in `rows`")
        h = r.exact(o["head"], "head", {"kind", "file", "rows", "softcap", "bias"})
        head = Head(
            r.one_of(h["kind"], "head.kind", HEADS),
            r.opt(h["file"], "head.file", r.str),
            r.int(h["rows"], "head.rows", 0),
            r.opt(h["softcap"], "head.softcap", r.num),
            r.bool(h["bias"], "head.bias"),
        )
        if head.kind == "readout" and (head.file is None or head.rows < 1):
            r.fail("head", "a readout head names its file and its rows")
        temps = {}
        for k, v in r.dict(o["temperature"], "temperature").items():
            r.one_of(k, f"temperature.{k}", KINDS)
            a, b = r.list(v, f"temperature.{k}", 2)
            temps[k] = Temperature(r.num(a, f"temperature.{k}[0]"), r.num(b, f"temperature.{k}[1]"))
        if set(temps) != set(KINDS):
            r.fail("temperature", f"needs one entry per question type ({', '.join(KINDS)})")
        noul = tuple(r.list(o["noul"], "noul", 2))
        if sorted(noul) != ["false", "true"]:
            r.fail("noul", 'lists "false" and "true" once each')
        noul_text = {
            r.one_of(k, f"noul_text.{k}", ("false", "true")): r.str(v, f"noul_text.{k}")
            for k, v in r.dict(o["noul_text"], "noul_text").items()
        }
        types = tuple(r.one_of(t, "types", KINDS) for t in r.list(o["types"], "types"))
        return cls(
            r.str(o["source"], "source"),
            messages,
            prompt,
            r.str(o["reply"], "reply"),
            r.bool(o["thinking"], "thinking"),
            state,
            labels,
            rows,
            head,
            temps,
            noul,
            noul_text,
            types,  # type: ignore[arg-type]
            r.int(o["max_options"], "max_options", 1),
            r.int(o["max_prompt_tokens"], "max_prompt_tokens", 1),
        )

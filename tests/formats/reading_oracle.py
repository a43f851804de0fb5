"""An independent reading of "flide-template-v1" decision checkpoints, the oracle of test_decision_layouts.

Consumes a checkpoint directory (its decision_config.json, the JSON and safetensors files that names, its
tokenizer and chat template) and a System One request {"state", "questions"}; produces the System One answers
{qid: answer} or raises Refused, and each question's prompt token ids. Written from the schema's semantics
only, over plain transformers in float32 (AutoTokenizer, apply_chat_template, AutoModelForCausalLM with torch
paths and eager attention), jinja2's immutable sandbox and float64 softmaxes; one forward pass per question.
"""

from __future__ import annotations

import json
import math
import re
import string
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox
import torch
from safetensors.torch import load_file

TYPES = ("choice", "noul", "score")
MAX_SET = 255
LETTERS = list(string.ascii_uppercase)
PAIRS = [a + b for a in string.ascii_uppercase for b in string.ascii_uppercase]


class Refused(Exception):
    """The reading turns the request down; `qid` names the question (None: the request as a whole)."""

    def __init__(self, qid: str | None, message: str) -> None:
        super().__init__(f"{qid}: {message}" if qid is not None else message)
        self.qid = qid
        self.message = message


class _TemplateRefusal(Exception):
    """refuse(message) called inside a template."""


@dataclass
class Rendered:
    """One question's prompt: its text (boundaries as a sentinel) and token ids."""

    text: str
    ids: list[int]


def resolve(value: Any, directory: Path) -> Any:
    """`"@file#a.b"` anywhere in a value: key a.b of that JSON file of the checkpoint ("@file": all of it)."""
    if isinstance(value, str) and value.startswith("@"):
        name, _, path = value[1:].partition("#")
        data = json.loads((directory / name).read_text(encoding="utf-8"))
        for key in path.split(".") if path else ():
            data = data[key]
        return data
    if isinstance(value, dict):
        return {k: resolve(v, directory) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, directory) for v in value]
    return value


def _describe(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _json(value: Any, indent: int | None = None, compact: bool = False) -> str:
    separators = (",", ":") if compact else None
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators)


def _refuse(message: str) -> None:
    raise _TemplateRefusal(str(message))


def _temperature(value: Any, n: int) -> float:
    if isinstance(value, dict):
        return math.exp(float(value["a"]) + float(value.get("b", 0.0)) * math.log(n))
    return float(value)


class Oracle:
    """The reading of one checkpoint. `answer(request)` gives System One answers; `prompt_ids(request)` each
    question's prompt token ids; both raise Refused as the reading would. `model` and `tokenizer` may be
    shared with an oracle of a checkpoint of the same weights and tokenizer files (they load in seconds)."""

    def __init__(self, checkpoint: str | Path, model: Any = None, tokenizer: Any = None) -> None:
        from transformers import AutoTokenizer

        self.dir = Path(checkpoint)
        raw = json.loads((self.dir / "decision_config.json").read_text(encoding="utf-8"))
        self.config = {k: v if k in ("messages", "prompt") else resolve(v, self.dir) for k, v in raw.items()}
        c = self.config
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(self.dir)
        self.sentinel = f"\x00boundary-{uuid.uuid4().hex}\x00"
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(keep_trailing_newline=True,
                                                           undefined=jinja2.StrictUndefined)
        env.filters |= {"describe": _describe, "text": _text, "json": _json}
        env.tests["matching"] = lambda s, pattern: isinstance(s, str) and re.search(pattern, s) is not None
        env.globals |= {"refuse": _refuse, "boundary": lambda: self.sentinel, "labels_for": self.labels_for}
        self.messages = [(m["role"], env.from_string(m["content"])) for m in c.get("messages", [])]
        self.prompt = env.from_string(c["prompt"]) if "prompt" in c else None
        self.state = dict(c["state"]) if "state" in c else None
        self.state_template = env.from_string(self.state["text"]) if self.state else None
        self.noul_order = list(c.get("noul", ["false", "true"]))
        self.noul_text = dict(c.get("noul_text", {}))
        self.types = tuple(c.get("types", TYPES))
        self.max_options = int(c.get("max_options", MAX_SET))
        self.max_prompt_tokens = int(c.get("max_prompt_tokens", 32768))
        self.head = c.get("head", "output")
        # label_ids pair with one explicit list of labels: the i-th label reads token (and readout row) i
        self.label_ids = [int(i) for i in c["label_ids"]] if "label_ids" in c else None
        self.label_list = list(c["labels"]) if self.label_ids is not None else None
        self.forms = c.get("label_forms")
        self._head: torch.Tensor | None = None
        self._sets: dict[str, list[tuple[int | None, list[str], dict[str, list[int]]]]] = {}
        self._model = model

    # --- labels -------------------------------------------------------------------------------------------

    def _probe(self) -> str:
        """Where a label is read by default: after the chat template's generation prompt (plus reply) of a
        bare user turn, or after nothing for a raw prompt. Only the prompt's last characters matter."""
        if self.prompt is not None:
            return ""
        text = self.tokenizer.apply_chat_template([{"role": "user", "content": "?"}], tokenize=False,
                                                  add_generation_prompt=True,
                                                  enable_thinking=bool(self.config.get("thinking", False)))
        return text + self.config.get("reply", "")

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _tokens_of(self, label: str) -> list[int]:
        """The token ids a label is read at (several with label_forms); [] where it is not one token."""
        if self.label_ids is not None:
            return [self.label_ids[self.label_list.index(label)]]
        if self.forms is not None:
            got: list[int] = []
            for form in self.forms:
                ids = self._encode(form.replace("{label}", label))
                if len(ids) == 1 and ids[0] not in got:
                    got.append(ids[0])
            return got
        if self.config.get("label_tokens") == "standalone":
            ids = self._encode(label)
            return ids if len(ids) == 1 and self.tokenizer.decode(ids) == label else []
        probe = self._probe()
        base, ids = self._encode(probe), self._encode(probe + label)
        return ids[-1:] if len(ids) == len(base) + 1 and ids[:-1] == base else []

    def _resolve_set(self, spec: Any) -> tuple[list[str], dict[str, list[int]]]:
        """A label set's labels (at most 255) and each one's token ids; two-letter labels that are not
        distinct tokens where read are skipped, any other label must be one."""
        if spec == "A-Z+":
            candidates, skippable = LETTERS + PAIRS, set(PAIRS)
        elif spec == "A-Z":
            candidates, skippable = LETTERS, set()
        elif spec == "pairs":
            candidates, skippable = PAIRS, set(PAIRS)
        elif isinstance(spec, list) and all(isinstance(x, str) for x in spec):
            candidates, skippable = list(spec), set()
        else:
            raise ValueError(f"not a label set: {spec!r}")
        labels: list[str] = []
        tokens: dict[str, list[int]] = {}
        taken: set[int] = set()
        for label in candidates:
            ids = self._tokens_of(label)
            if not ids or taken & set(ids):
                if label in skippable:
                    continue
                raise ValueError(f"label {label!r} is not one distinct token where it is read")
            labels.append(label)
            tokens[label] = ids
            taken |= set(ids)
            if len(labels) == MAX_SET:
                break
        return labels, tokens

    def _tiers(self, kind: str) -> list[tuple[int | None, list[str], dict[str, list[int]]]]:
        if kind not in self._sets:
            spec = self.config.get("labels", "A-Z+")
            if isinstance(spec, dict):
                spec = spec.get(kind, spec.get("default", "A-Z+"))
            tiered = isinstance(spec, list) and spec and isinstance(spec[0], dict)
            tiers = spec if tiered else [{"labels": spec}]
            self._sets[kind] = [(t.get("upto"), *self._resolve_set(t["labels"])) for t in tiers]
        return self._sets[kind]

    def _tier(self, kind: str, n: int) -> tuple[list[str], dict[str, list[int]]]:
        for upto, labels, tokens in self._tiers(kind):
            if upto is None or upto >= n:
                if len(labels) < n:
                    raise _TemplateRefusal(f"{n} options, {len(labels)} labels")
                return labels[:n], tokens
        raise _TemplateRefusal(f"no label tier for {n} options")

    def labels_for(self, kind: str, n: int) -> list[str]:
        return self._tier(kind, int(n))[0]

    # --- prompts ------------------------------------------------------------------------------------------

    def _shape(self, qid: str, q: dict) -> dict:
        kind = q["type"]
        criteria = q.get("criteria")
        if kind == "noul":
            criteria = criteria if criteria is not None else {}
        given = sorted(k for k in ("type", "instructions", "criteria") if k in q)
        return {"key": qid, "type": kind, "instructions": q.get("instructions"), "criteria": criteria,
                "given": given}

    def _options(self, question: dict) -> list[dict]:
        kind, criteria = question["type"], question["criteria"]
        if kind == "choice":
            pairs = list(criteria.items())
        elif kind == "score":
            pairs = [(str(i), level) for i, level in enumerate(criteria)]
        else:
            pairs = []
            for key in self.noul_order:
                d = criteria.get(key)
                pairs.append((key, d if d is not None else self.noul_text.get(key)))
        labels = self.labels_for(kind, len(pairs))
        return [{"label": label, "key": k, "description": d, "index": i}
                for i, (label, (k, d)) in enumerate(zip(labels, pairs, strict=True))]

    def _state_text(self, state: Any, budget: int) -> tuple[str, int]:
        """The state as the prompt shows it, cut to `budget` tokens, and its uncut token count."""
        text = self.state_template.render(state=state)
        ids = self._encode(text)
        if len(ids) <= budget:
            return text, len(ids)
        keep = self.state.get("keep", "head")
        if isinstance(keep, dict):
            shape = "list" if isinstance(state, list) else "object" if isinstance(state, dict) else "string"
            keep = keep.get(shape, keep.get("default", "head"))
        kept = ids[:budget] if keep == "head" else ids[len(ids) - budget:]
        before, after = self.state.get("marks", {}).get(keep, ["", ""])
        return before + self.tokenizer.decode(kept) + after, len(ids)

    def _render(self, request: dict, shaped: dict[str, dict], qid: str, state_text: str | None) -> Rendered:
        question = shaped[qid]
        ctx = {"state": request["state"], "state_text": state_text, "question": question,
               "options": self._options(question), "questions": list(shaped.values())}
        if self.prompt is not None:
            text = self.prompt.render(ctx)
        else:
            turns = [{"role": role, "content": t.render(ctx)} for role, t in self.messages]
            text = self.tokenizer.apply_chat_template(
                turns, tokenize=False, add_generation_prompt=True,
                enable_thinking=bool(self.config.get("thinking", False))) + self.config.get("reply", "")
        ids = [i for part in text.split(self.sentinel) if part for i in self._encode(part)]
        return Rendered(text, ids)

    def render(self, request: dict) -> dict[str, Rendered]:
        """Every question's prompt, the state cut so that the longest fits max_prompt_tokens."""
        shaped = {qid: self._shape(qid, q) for qid, q in request["questions"].items()}
        for qid, question in shaped.items():
            n = 2 if question["type"] == "noul" else len(question["criteria"])
            if question["type"] not in self.types:
                raise Refused(qid, f"this model does not read {question['type']} questions")
            if n > self.max_options:
                raise Refused(qid, f"{n} options, at most {self.max_options}")
        st = self.state or {}
        budget, tries = int(st.get("max_tokens", 0)), int(st.get("tries", 1))
        for attempt in range(tries + 1):
            state_text, state_tokens = self._state_text(request["state"], budget) if self.state else (None, 0)
            prompts = {}
            for qid in shaped:
                try:
                    prompts[qid] = self._render(request, shaped, qid, state_text)
                except _TemplateRefusal as e:
                    raise Refused(qid, str(e)) from None
            longest = max(prompts, key=lambda q: len(prompts[q].ids))
            excess = len(prompts[longest].ids) - self.max_prompt_tokens
            if excess <= 0:
                return prompts
            if not self.state or attempt == tries:
                raise Refused(longest, f"{len(prompts[longest].ids)} prompt tokens, at most "
                                       f"{self.max_prompt_tokens}")
            budget = min(budget, state_tokens) - excess - int(st.get("slack", 0))
            if budget < max(int(st.get("min_tokens", 0)), 1):
                raise Refused(longest, f"the state would be cut below {st.get('min_tokens', 0)} tokens")
        raise AssertionError("unreachable")

    def prompt_ids(self, request: dict) -> dict[str, list[int]]:
        return {qid: r.ids for qid, r in self.render(request).items()}

    # --- reading ------------------------------------------------------------------------------------------

    @property
    def model(self) -> Any:
        if self._model is None:
            from transformers import AutoModelForCausalLM

            self._model = AutoModelForCausalLM.from_pretrained(self.dir, dtype=torch.float32,
                                                               attn_implementation="eager").eval()
        return self._model

    def _final_hidden(self, ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            out = self.model.model(input_ids=torch.tensor([ids]))
        return out.last_hidden_state[0, -1]

    def label_logits(self, kind: str, n: int, ids: list[int]) -> list[float]:
        """The question's label logits (float64 values, label order) at its prompt's last position."""
        labels, tokens = self._tier(kind, n)
        h = self._final_hidden(ids)
        if self.head == "output":
            with torch.no_grad():
                logits = self.model.get_output_embeddings()(h).double()
            out = []
            for label in labels:
                xs = [float(logits[t]) for t in tokens[label]]
                top = max(xs)
                out.append(top + math.log(math.fsum(math.exp(x - top) for x in xs)))
            return out
        if self._head is None:
            self._head = load_file(str(self.dir / self.head))[self.config.get("head_key", "weight")].double()
        # one row per label: its index in label_ids' list, else its index in the question's labels
        rows = [self.label_list.index(label) for label in labels] if self.label_list else range(len(labels))
        return [float(h.double() @ self._head[r]) for r in rows]

    def answer(self, request: dict) -> dict[str, dict]:
        prompts = self.render(request)
        answers = {}
        for qid, q in request["questions"].items():
            kind = q["type"]
            criteria = q.get("criteria") or {}
            n = 2 if kind == "noul" else len(criteria)
            temperature = self.config.get("temperature", 1.0)
            if isinstance(temperature, dict) and not {"a", "b"} >= set(temperature):
                temperature = temperature.get(kind, temperature.get("default", 1.0))
            t = _temperature(temperature, n)
            xs = [x / t for x in self.label_logits(kind, n, prompts[qid].ids)]
            top = max(xs)
            es = [math.exp(x - top) for x in xs]
            ps = [e / math.fsum(es) for e in es]
            answers[qid] = _answer(kind, q, ps, self.noul_order)
        return answers


def _answer(kind: str, q: dict, ps: list[float], noul_order: list[str]) -> dict:
    n = len(ps)
    if kind == "noul":
        return {"type": "noul", "noul": ps[noul_order.index("true")]}
    mode = max(range(n), key=lambda i: (ps[i], -i))
    if kind == "choice":
        names = list(q["criteria"])
        return {"type": "choice", "choice": names[mode], "probabilities": dict(zip(names, ps, strict=True)),
                "confidence": (ps[mode] - 1 / n) / (1 - 1 / n)}
    spread = sum(abs(i - (n - 1) / 2) for i in range(n)) / n
    return {"type": "score", "score": math.fsum(i * p for i, p in enumerate(ps)),
            "legend": {str(i): level for i, level in enumerate(q["criteria"])},
            "probabilities": {str(i): p for i, p in enumerate(ps)},
            "confidence": max(0.0, 1 - math.fsum(p * abs(i - mode) for i, p in enumerate(ps)) / spread)}

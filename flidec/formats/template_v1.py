"""flide-template-v1: a checkpoint's decision_config.json (or `flidec compile --format FILE`) -> its format.

Consumes the public declarative schema that flide 0.1.4 documents for decision checkpoints (every field in
docs/FORMATS.md), the checkpoint directory (for `@file#a.b` references into its own JSON files, its readout
head and its config) and its tokenizer (to turn labels into the token ids they are read at); produces the
resolved runtime/decision/format.DecisionFormat and the readout head file to copy into the artifact. Every
field is implemented or refused: an unknown field, a malformed value or a feature flidec does not build
(`abstain`, `second_reading`, pointer heads, non-causal attention) is a FormatError naming its path.
"""

from __future__ import annotations

import dataclasses
import json
import math
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from safetensors import safe_open

from flidec.ir.errors import FlideError
from flidec.runtime.decision.fields import Fields
from flidec.runtime.decision.format import HEAD_FILE, KINDS, DecisionFormat, Head, StateCut, Temperature, Tier
from flidec.runtime.decision.render import BOUNDARY, Question, Refusal, Renderer

FORMAT_ID = "flide-template-v1"
MAX_LABELS = 255  # labels kept a set: a System One choice has at most 255 options
LETTERS = tuple(string.ascii_uppercase)
PAIRS = tuple(a + b for a in LETTERS for b in LETTERS)
FIELDS = {
    "format_id",
    "match",
    "messages",
    "prompt",
    "reply",
    "thinking",
    "state",
    "labels",
    "label_ids",
    "label_tokens",
    "label_forms",
    "head",
    "head_key",
    "softcap",
    "temperature",
    "noul",
    "noul_text",
    "types",
    "max_options",
    "max_prompt_tokens",
    # beyond the schema (releases' own code and cards; docs/FORMATS.md "Beyond the schema")
    "head_bias",
    "mask",
    "abstain",
    "second_reading",
    "pointer",
    "attention",
}
REFUSED = {
    "abstain": "an always-valid abstain slot is not built: its probability would have to leave the "
    "question's own options, which the System One answer has no place for",
    "second_reading": "a second reading with the options reversed is not built: each question would be "
    "read twice (two forked reads of one state) and its answer made from both rows",
    "pointer": "pointer heads (each option's last hidden state scored against the decision position) are "
    "not built: a read would need the rows of every option's last token, not one row",
}


class FormatError(FlideError):
    """A decision format that cannot be read as written: names its file and field."""


def resolve_refs(value: Any, model_dir: Path, f: Fields, path: str) -> Any:
    """`value` with every "@file#a.b" string replaced by key a.b of the checkpoint's JSON file `file`."""
    if isinstance(value, str) and value.startswith("@"):
        name, _, key = value[1:].partition("#")
        file = (model_dir / name).resolve()
        if not file.is_relative_to(model_dir.resolve()) or not file.is_file():
            raise f.fail(path, f"{value!r}: {name} is not a file of the checkpoint")
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise f.fail(path, f"{value!r}: {name} is not JSON ({e})") from None
        for k in key.split(".") if key else []:
            if not isinstance(data, dict) or k not in data:
                raise f.fail(path, f"{value!r}: {name} has no key {key!r}")
            data = data[k]
        return data
    if isinstance(value, dict):
        return {k: resolve_refs(v, model_dir, f, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_refs(v, model_dir, f, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def read_template(
    config: Mapping[str, Any], model_dir: Path, tokenizer: Any, *, source: str, model_id: str | None = None
) -> tuple[DecisionFormat, Path | None]:
    """The DecisionFormat a flide-template-v1 configuration describes for this checkpoint, and the readout
    head file it reads (None: the output head)."""
    f = Fields(source, FormatError)
    raw = f.keys(dict(config), "", FIELDS, {"format_id"})
    if raw["format_id"] != FORMAT_ID:
        raise f.fail("format_id", f"is {raw['format_id']!r}; flidec reads {FORMAT_ID!r}")
    for key, why in REFUSED.items():
        if key in raw:
            raise f.fail(key, why)
    if raw.get("attention", "causal") != "causal":
        raise f.fail(
            "attention",
            f"is {raw['attention']!r}: attention that is not causal inside the state "
            "is not built (flidec forks causal prefixes: a state read both ways would have to be "
            "computed per question)",
        )
    cfg = {
        k: (v if k in ("messages", "prompt", "match") else resolve_refs(v, model_dir, f, k))
        for k, v in raw.items()
    }
    if "match" in cfg:
        _check_match(f, cfg["match"], model_dir, model_id)
    if ("messages" in cfg) == ("prompt" in cfg):
        raise f.fail("messages", "a format has either messages (chat turns) or a prompt, not both or neither")
    messages: tuple[tuple[str, str], ...] = ()
    if "messages" in cfg:
        for i, m in enumerate(f.list(cfg["messages"], "messages")):
            m = f.keys(m, f"messages[{i}]", {"role", "content"}, {"role", "content"})
            if m["role"] not in ("system", "user", "assistant"):
                raise f.fail(f"messages[{i}].role", f"is {m['role']!r}; one of system, user, assistant")
            messages += ((m["role"], f.str(m["content"], f"messages[{i}].content")),)
        if not messages:
            raise f.fail("messages", "is empty")
    elif "reply" in cfg:
        raise f.fail(
            "reply",
            "goes after the chat template's generation prompt: it needs messages, and a "
            "prompt writes its own end",
        )
    prompt = f.str(cfg["prompt"], "prompt") if "prompt" in cfg else None
    thinking = cfg.get("thinking", False)
    if not isinstance(thinking, bool):
        raise f.fail("thinking", "must be true or false")
    state = _state(f, cfg["state"]) if "state" in cfg else None
    head_file, head, rows_n = _head(f, cfg, model_dir, tokenizer)
    noul = tuple(f.list(cfg.get("noul", ["false", "true"]), "noul"))
    if sorted(noul) != ["false", "true"]:
        raise f.fail("noul", 'lists "false" and "true" once each')
    noul_text = {
        k: f.str(v, f"noul_text.{k}")
        for k, v in f.keys(cfg.get("noul_text", {}), "noul_text", {"false", "true"}).items()
    }
    types = tuple(f.list(cfg.get("types", list(KINDS)), "types"))
    if not types or not set(types) <= set(KINDS) or len(set(types)) != len(types):
        raise f.fail("types", f"lists question types, each once, among {', '.join(KINDS)}")
    mask = cfg.get("mask")
    if mask is not None and f.num(mask, "mask") > -1e4:
        raise f.fail(
            "mask",
            f"is {mask}: flidec normalizes over a question's own labels, which equals "
            "masking the other rows with -1e4 or less; a larger mask value is not built",
        )
    base = DecisionFormat(
        source=source,
        messages=messages,
        prompt=prompt,
        reply=f.str(cfg.get("reply", ""), "reply"),
        thinking=thinking,
        state=state,
        labels={k: (Tier(None, ("A", "B")),) for k in KINDS},
        rows={"A": (0,), "B": (1,)},
        head=head,
        temperature=_temperatures(f, cfg.get("temperature", 1.0)),
        noul=noul,
        noul_text=noul_text,
        types=types,  # type: ignore[arg-type]
        max_options=f.int(cfg.get("max_options", MAX_LABELS), "max_options", 2),
        max_prompt_tokens=f.int(cfg.get("max_prompt_tokens", 32768), "max_prompt_tokens", 1),
    )
    labels, rows = _Labels(f, cfg, base, tokenizer, head.kind == "readout").resolve()
    if head.kind == "readout" and rows_n != len(rows):
        raise f.fail("head", f"{cfg['head']}: {rows_n} readout rows for {len(rows)} labels (one row a label)")
    return dataclasses.replace(base, labels=labels, rows=rows), head_file


def _check_match(f: Fields, match: Any, model_dir: Path, model_id: str | None) -> None:
    """`match` claims the checkpoints a configuration is for: by hub repository, or by the checkpoint's files
    and its own decision_config.json's values and keys. A checkpoint it does not claim is refused."""
    m = f.keys(match, "match", {"repos", "files", "decision_config", "decision_config_keys"})
    repos = [f.str(r, "match.repos") for r in f.list(m.get("repos", []), "match.repos")]
    here = (model_id or "").lower()
    cached = str(model_dir.resolve()).lower()
    if any(r.lower() == here or f"models--{r.lower().replace('/', '--')}" in cached for r in repos):
        return
    files = [f.str(x, "match.files") for x in f.list(m.get("files", []), "match.files")]
    dc_path = model_dir / "decision_config.json"
    dc = json.loads(dc_path.read_text(encoding="utf-8")) if dc_path.is_file() else None
    want = m.get("decision_config")
    keys = m.get("decision_config_keys")
    if (
        files
        and all((model_dir / x).is_file() for x in files)
        and (want is None or (dc is not None and all(dc.get(k) == v for k, v in want.items())))
        and (keys is None or (dc is not None and set(dc) == set(keys)))
    ):
        return
    claimed = ", ".join(repos) or f"checkpoints with {', '.join(files) or 'no files'}"
    raise f.fail(
        "match",
        f"claims {claimed}; {model_dir} is not one of them (leave `match` out to read "
        "this checkpoint with it)",
    )


def _state(f: Fields, v: Any) -> StateCut:
    s = f.keys(
        v,
        "state",
        {"text", "max_tokens", "min_tokens", "keep", "marks", "slack", "tries"},
        {"text", "max_tokens"},
    )
    keep = s.get("keep", "head")
    keep = dict(keep) if isinstance(keep, dict) else {"default": keep}
    f.keys(keep, "state.keep", {"list", "default"}, {"default"})
    for k, side in keep.items():
        if side not in ("head", "tail"):
            raise f.fail(
                f"state.keep.{k}" if isinstance(s.get("keep"), dict) else "state.keep",
                f"is {side!r}; head or tail",
            )
    marks = {}
    for side, pair in f.keys(s.get("marks", {}), "state.marks", {"head", "tail"}).items():
        pair = f.list(pair, f"state.marks.{side}")
        if len(pair) != 2:
            raise f.fail(f"state.marks.{side}", "is [text before, text after]")
        marks[side] = (f.str(pair[0], f"state.marks.{side}[0]"), f.str(pair[1], f"state.marks.{side}[1]"))
    return StateCut(
        f.str(s["text"], "state.text"),
        f.int(s["max_tokens"], "state.max_tokens", 1),
        f.int(s.get("min_tokens", 0), "state.min_tokens"),
        keep,
        marks,
        f.int(s.get("slack", 0), "state.slack"),
        f.int(s.get("tries", 1), "state.tries", 1),
    )


def _temperatures(f: Fields, v: Any) -> dict[str, Temperature]:
    def one(x: Any, path: str) -> Temperature:
        if isinstance(x, dict):
            x = f.keys(x, path, {"a", "b"}, {"a"})
            return Temperature(f.num(x["a"], f"{path}.a"), f.num(x.get("b", 0.0), f"{path}.b"))
        t = f.num(x, path)
        if t <= 0:
            raise f.fail(path, f"is {t}; a temperature is above 0")
        return Temperature(math.log(t))

    if not isinstance(v, dict):
        return dict.fromkeys(KINDS, one(v, "temperature"))
    f.keys(v, "temperature", {"default", *KINDS})
    return {
        k: one(v.get(k, v.get("default", 1.0)), f"temperature.{k}" if k in v else "temperature.default")
        for k in KINDS
    }


def _head(
    f: Fields, cfg: Mapping[str, Any], model_dir: Path, tokenizer: Any
) -> tuple[Path | None, Head, int]:
    """The head: the output head (soft-capped as the model's config says, unless `softcap` is false) or a
    readout file of the checkpoint; also its file and row count."""
    name = f.str(cfg.get("head", "output"), "head")
    softcap = cfg.get("softcap", True)
    if not isinstance(softcap, bool):
        raise f.fail("softcap", "must be true or false")
    if name == "output":
        for key in ("head_key", "head_bias"):
            if key in cfg:
                raise f.fail(key, "names a tensor of a readout head file; this format reads the output head")
        cap = _model_softcap(model_dir) if softcap else None
        return None, Head("output", softcap=cap), 0
    if "softcap" in cfg and softcap:
        raise f.fail("softcap", "applies to the output head; a readout head is read as it is")
    file = (model_dir / name).resolve()
    if (
        not name.endswith(".safetensors")
        or not file.is_file()
        or not file.is_relative_to(model_dir.resolve())
    ):
        raise f.fail("head", f'is {name!r}: "output" or a .safetensors file of the checkpoint')
    key = f.str(cfg.get("head_key", "weight"), "head_key")
    bias = cfg.get("head_bias")
    with safe_open(str(file), "pt") as st:
        names = set(st.keys())
        if key not in names:
            raise f.fail("head_key", f"{name} has no tensor {key!r} (it has {', '.join(sorted(names))})")
        shape = st.get_slice(key).get_shape()
        if bias is not None:
            if f.str(bias, "head_bias") not in names:
                raise f.fail("head_bias", f"{name} has no tensor {bias!r}")
            if st.get_slice(bias).get_shape() != [shape[0]]:
                raise f.fail("head_bias", f"{bias!r} must have one value per readout row ({shape[0]})")
    hidden = _hidden_size(model_dir)
    if len(shape) != 2 or shape[1] != hidden:
        raise f.fail("head", f"{name}:{key} has shape {shape}; a readout head is [labels, {hidden}]")
    return file, Head("readout", file=HEAD_FILE, rows=shape[0], bias=bias is not None), shape[0]


def _model_config(model_dir: Path) -> dict:
    cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    return cfg.get("text_config", cfg)


def _model_softcap(model_dir: Path) -> float | None:
    cap = _model_config(model_dir).get("final_logit_softcapping")
    return float(cap) if cap else None


def _hidden_size(model_dir: Path) -> int:
    return int(_model_config(model_dir)["hidden_size"])


class _Labels:
    """Label sets per question type and the head rows each label reads."""

    def __init__(
        self, f: Fields, cfg: Mapping[str, Any], base: DecisionFormat, tokenizer: Any, readout: bool
    ):
        self.f, self.cfg, self.tok, self.readout = f, cfg, tokenizer, readout
        self.rows: dict[str, tuple[int, ...]] = {}
        self.forms = [
            f.str(x, f"label_forms[{i}]")
            for i, x in enumerate(f.list(cfg.get("label_forms", []), "label_forms"))
        ]
        how = cfg.get("label_tokens", "prompt")
        if how not in ("prompt", "standalone"):
            raise f.fail(
                "label_tokens",
                f'is {how!r}; "standalone" (the label encoded alone) or "prompt" '
                "(its token after the prompt, the default)",
            )
        self.standalone = how == "standalone"
        self.probe: list[int] | None = None
        self.probe_text = ""
        if not self.standalone or self.forms:
            renderer = Renderer(base, tokenizer)
            q = Question(
                "q",
                "choice",
                "?",
                {"x": None, "y": None},
                ("criteria", "instructions", "type"),
                (("x", None), ("y", None)),
            )
            try:
                text = renderer.prompt("s", "s" if base.state else None, q, ("A", "B"), [q])
            except Refusal as e:
                raise f.fail(
                    "labels", f"the format refuses the probe question its labels are found with: {e}"
                ) from None
            self.probe_text = text.split(BOUNDARY)[-1]
            self.probe = tokenizer.encode_template(self.probe_text)

    def resolve(self) -> tuple[dict[str, tuple[Tier, ...]], dict[str, tuple[int, ...]]]:
        f, cfg = self.f, self.cfg
        raw = cfg.get("labels", "A-Z+")
        if "label_ids" in cfg:
            return self._fixed(raw, f.list(cfg["label_ids"], "label_ids"))
        if self.readout:
            raise f.fail("label_ids", "is required with a readout head: it fixes each label's row")
        per = raw if isinstance(raw, dict) else dict.fromkeys(KINDS, raw)
        if isinstance(raw, dict):
            f.keys(raw, "labels", {"default", *KINDS})
        labels = {}
        for kind in KINDS:
            path = (
                f"labels.{kind}"
                if isinstance(raw, dict) and kind in raw
                else "labels.default"
                if isinstance(raw, dict)
                else "labels"
            )
            v = per.get(kind, per.get("default", "A-Z+"))
            tiers = v if isinstance(v, list) and v and isinstance(v[0], dict) else [{"labels": v}]
            out = []
            for i, t in enumerate(tiers):
                tpath = f"{path}[{i}]" if tiers is v else path
                t = f.keys(t, tpath, {"upto", "labels"}, {"labels"}) if tiers is v else t
                upto = None if t.get("upto") is None else f.int(t["upto"], f"{tpath}.upto", 1)
                out.append(Tier(upto, self._set(t["labels"], f"{tpath}.labels" if tiers is v else tpath)))
            labels[kind] = tuple(out)
        return labels, self.rows

    def _fixed(self, raw: Any, ids: list) -> tuple[dict[str, tuple[Tier, ...]], dict[str, tuple[int, ...]]]:
        f = self.f
        if not isinstance(raw, list):
            raise f.fail("labels", "must be the explicit list that label_ids gives the ids of")
        if len(raw) != len(ids):
            raise f.fail("label_ids", f"has {len(ids)} ids for {len(raw)} labels")
        if self.forms:
            raise f.fail(
                "label_forms", "reads each label's forms by their tokens; label_ids fixes them already"
            )
        vocab = self.tok.vocab_size
        for i, (label, tid) in enumerate(zip(raw, ids, strict=True)):
            f.str(label, f"labels[{i}]")
            f.int(tid, f"label_ids[{i}]")
            if not self.readout and tid >= vocab:
                raise f.fail(f"label_ids[{i}]", f"is {tid}, past the vocabulary ({vocab})")
            if label in self.rows:
                raise f.fail(f"labels[{i}]", f"{label!r} is listed twice")
            self.rows[label] = (i,) if self.readout else (tid,)
        tier = (Tier(None, tuple(raw[:MAX_LABELS])),)
        return dict.fromkeys(KINDS, tier), self.rows

    def _set(self, v: Any, path: str) -> tuple[str, ...]:
        """A label set's labels, each with the rows it reads; two-letter labels of "A-Z+" and "pairs" that
        are not read as one distinct token are left out."""
        f = self.f
        if v == "A-Z+":
            cands, optional = LETTERS + PAIRS, True
        elif v == "A-Z":
            cands, optional = LETTERS, False
        elif v == "pairs":
            cands, optional = PAIRS, True
        elif isinstance(v, list) and v:
            cands, optional = tuple(f.str(x, f"{path}[{i}]") for i, x in enumerate(v)), False
        else:
            raise f.fail(path, f'is {json.dumps(v)[:40]}; "A-Z+", "A-Z", "pairs", a list of labels or tiers')
        kept: list[str] = []
        seen: set[int] = set()
        for label in cands:
            if len(kept) == MAX_LABELS:
                break
            rows = self._rows(label)
            if not rows or seen & set(rows[:1]):
                if optional and len(label) > 1:
                    continue
                raise f.fail(path, f"label {label!r} is not read as one distinct token here")
            if self.rows.setdefault(label, rows) != rows:
                raise f.fail(path, f"label {label!r} reads other tokens in another set")
            seen.update(rows)
            kept.append(label)
        return tuple(kept)

    def _rows(self, label: str) -> tuple[int, ...]:
        """The token ids `label` is read at: its forms' one-token encodings (a label of several letters only
        when its first form is also its token after the prompt), its one standalone token, or the one token
        it adds after the probe prompt; () when there is none."""
        tok = self.tok
        if self.forms:
            ids: list[int] = []
            for form in self.forms:
                enc = tok.encode_template(form.format(label=label))
                if len(enc) == 1 and enc[0] not in ids:
                    ids.append(enc[0])
            if ids and len(label) > 1 and self._after_prompt(label) != ids[0]:
                return ()
            return tuple(ids)
        if self.standalone:
            enc = tok.encode_template(label)
            return (enc[0],) if len(enc) == 1 and tok.decode(enc) == label else ()
        token = self._after_prompt(label)
        return () if token is None else (token,)

    def _after_prompt(self, label: str) -> int | None:
        """The one token `label` adds after the probe prompt, or None."""
        assert self.probe is not None
        enc = self.tok.encode_template(self.probe_text + label)
        n = len(self.probe)
        return enc[n] if len(enc) == n + 1 and enc[:n] == self.probe else None

"""flide-template-v1 configurations resolved and refused (flidec/formats/template_v1.py), format.json read
back and refused (runtime/decision/format.py), and the cut rule that keeps a prompt's ids (reading.cut).

Every refusal names the field's path; a field flidec does not implement is refused, never ignored.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from flidec.formats import resolve_format
from flidec.formats.template_v1 import FormatError, read_template
from flidec.ir.errors import ArtifactError
from flidec.ir.tree import Format
from flidec.models.tokenizer import load_tokenizer
from flidec.runtime.decision.format import DecisionFormat
from flidec.runtime.decision.reading import DecisionReading
from flidec.runtime.decision.render import BOUNDARY

GENERIC = Format("next_token", (("style", "vllm"),))


@pytest.fixture(scope="module")
def ckpt(decision_checkpoint, tmp_path_factory) -> Path:
    """A writable copy of the readout layout's checkpoint (the tests rewrite its decision_config.json)."""
    out = tmp_path_factory.mktemp("template") / "ckpt"
    shutil.copytree(decision_checkpoint("readout"), out)
    return out


def config(ckpt: Path) -> dict:
    return json.loads((ckpt / "decision_config.json").read_text())


def resolve(ckpt: Path, cfg: dict):
    return read_template(cfg, ckpt, load_tokenizer(ckpt), source="decision_config.json")


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda c: c.update(foo=1), "`foo` is not a field"),
        (
            lambda c: c.update(state={"text": "{{ state }}", "max_tokens": 9, "keep_end": 1}),
            "`state.keep_end`",
        ),
        (lambda c: c.update(state={"text": "{{ state }}"}), "`state.max_tokens` is required"),
        (
            lambda c: c.update(state={"text": "x", "max_tokens": 9, "keep": "middle"}),
            "`state.keep` is 'middle'",
        ),
        (lambda c: c.update(temperature={"choice": {"a": 1, "c": 2}}), "`temperature.choice.c`"),
        (lambda c: c.update(temperature=-1.0), "`temperature` is -1.0"),
        (lambda c: c.update(noul=["true", "true"]), "`noul`"),
        (lambda c: c.update(types=["choice", "rank"]), "`types`"),
        (lambda c: c.update(label_tokens="sometimes"), "`label_tokens`"),
        (
            lambda c: c.update(label_ids=c["label_ids"][:3] if isinstance(c["label_ids"], list) else [1, 2]),
            "`label_ids`",
        ),
        (lambda c: c.update(head="missing.safetensors"), "`head`"),
        (lambda c: c.update(head_key="w"), "`head_key`"),
        (lambda c: c.update(messages=[{"role": "tool", "content": "x"}]), "`messages[0].role`"),
        (lambda c: c.update(prompt="{{ state }}"), "`messages`"),
        (lambda c: c.update(labels="@nope.json#codes"), "`labels`"),
        (lambda c: c.update(labels="@readout_config.json#nothing"), "`labels`"),
        (lambda c: c.update(abstain=255), "`abstain`"),
        (lambda c: c.update(second_reading={"threshold": 0.5}), "`second_reading`"),
        (lambda c: c.update(pointer={"at": "option"}), "`pointer`"),
        (lambda c: c.update(attention="block"), "`attention`"),
        (lambda c: c.update(mask=-1.0), "`mask`"),
        (lambda c: c.update(match={"repos": ["someone/else"]}), "`match`"),
        (lambda c: c.update(format_id="flide-template-v2"), "`format_id`"),
    ],
)
def test_refusals_name_the_field(ckpt, edit, path):
    cfg = config(ckpt)
    edit(cfg)
    with pytest.raises(FormatError, match=path.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        resolve(ckpt, cfg)


def test_refs_and_tiers_resolve(ckpt):
    cfg = config(ckpt)
    fmt, head = resolve(ckpt, cfg)
    assert head == ckpt / "readout.safetensors"
    codes = json.loads((ckpt / "readout_config.json").read_text())["codes"]
    assert fmt.labels_for("choice", 3) == tuple(codes[:3])
    assert fmt.rows[codes[4]] == (4,), "a readout label reads its row in the label list"
    cfg2 = {k: v for k, v in cfg.items() if k not in ("labels", "label_ids", "head")}
    cfg2["labels"] = {
        "choice": [{"upto": 3, "labels": ["X", "Y", "Z"]}, {"labels": "A-Z+"}],
        "default": "A-Z",
    }
    fmt2, head2 = resolve(ckpt, cfg2)
    assert head2 is None and fmt2.head.kind == "output"
    assert fmt2.labels_for("choice", 2) == ("X", "Y")
    assert fmt2.labels_for("choice", 4) == ("A", "B", "C", "D")
    assert len(fmt2.labels_for("choice", 200)) == 200  # two-letter labels past Z
    with pytest.raises(ValueError, match="at most 26"):
        fmt2.labels_for("score", 27)


def test_a_foreign_decision_config_is_refused_not_ignored(ckpt, tmp_path):
    """A checkpoint whose decision_config.json is not flide-template-v1 defines its own reading: compiling
    it with the generic reading would give wrong probabilities without a word, so it is refused."""
    other = tmp_path / "other"
    shutil.copytree(ckpt, other)
    (other / "decision_config.json").write_text(json.dumps({"format_version": 1, "codes": ["A", "B"]}))
    with pytest.raises(FormatError, match="--format next_token"):
        resolve_format(GENERIC, other, load_tokenizer(other))
    assert resolve_format(GENERIC, other, load_tokenizer(other), "next_token").decision is None


def test_format_json_round_trips_and_refuses_bad_fields(ckpt):
    fmt, _ = resolve(ckpt, config(ckpt))
    again = DecisionFormat.from_json(json.loads(json.dumps(fmt.to_json())))
    assert again == fmt
    for edit, field in [
        (lambda o: o.update(version=9), "`version`"),
        (lambda o: o["head"].update(kind="pointer"), "`head.kind`"),
        (lambda o: o["temperature"].pop("noul"), "`temperature`"),
        (lambda o: o.update(extra=1), "`extra` is not a field"),
        (lambda o: o["rows"].pop(fmt.labels["choice"][0].labels[0]), "has no head rows"),
    ]:
        obj = json.loads(json.dumps(fmt.to_json()))
        edit(obj)
        with pytest.raises(ArtifactError, match=field.replace("(", r"\(")):
            DecisionFormat.from_json(obj)


def test_cuts_keep_the_whole_prompts_ids(ckpt):
    """A cut lands only where both sides tokenized apart give the whole text's ids: after a newline that
    non-whitespace follows, at an added token or at a boundary; never where the prompts already part."""
    tok = load_tokenizer(ckpt)
    fmt, _ = resolve(ckpt, config(ckpt))
    r = DecisionReading(fmt, tok)
    a = "State:\nline one.\n\nQuestion: first<|im_end|>\n"
    b = "State:\nline one.\n\nQuestion: second<|im_end|>\n"
    c = r.cut([a, b], 0)
    assert a[:c] == "State:\nline one.\n\n"
    assert r.cut([a + "x", a + "y"], 0) == len(a), "right after a newline, before the parting character"
    assert r.cut(["abc.\n\n  x", "abc.\n\n  y"], 0) == 0, "no cut before whitespace"
    assert r.cut(["ab" + BOUNDARY + "cd", "ab" + BOUNDARY + "ce"], 0) == 2 + len(BOUNDARY)
    for text in (a, b, "x<|im_start|>user\nhi"):
        for cut in range(len(text) + 1):
            if r.cut([text + "1", text + "2"], 0) == cut:
                whole = tok.encode_template(text + "1")
                assert tok.encode_template(text[:cut]) + tok.encode_template(text[cut:] + "1") == whole


def test_a_readout_bias_is_added_before_the_temperature(ckpt, tmp_path):
    """`head_bias` (beyond the schema: openthai-style readout heads): each row's bias joins its logit in
    float64, then the temperature and the softmax over the question's options."""
    import math

    import torch
    from safetensors.torch import load_file, save_file

    from flidec.runtime.decision.reading import DecisionPiece

    other = tmp_path / "biased"
    shutil.copytree(ckpt, other)
    head = load_file(str(other / "readout.safetensors"))
    bias = torch.linspace(-1.0, 1.0, head["weight"].shape[0])
    save_file({"weight": head["weight"], "bias": bias}, str(other / "readout.safetensors"))
    cfg = config(other) | {"head_bias": "bias"}
    (other / "decision_config.json").write_text(json.dumps(cfg))
    chosen = resolve_format(GENERIC, other, load_tokenizer(other))
    assert chosen.decision.head.bias and torch.equal(chosen.head["bias"], bias)
    piece = DecisionPiece((), (3, 7), "choice", ("a", "b"), (1, 1), 2.0)
    got = chosen.fmt.answer(piece, [0.5, 0.25])
    z = [(0.5 + float(bias[3])) / 2.0, (0.25 + float(bias[7])) / 2.0]
    want = math.exp(z[0]) / (math.exp(z[0]) + math.exp(z[1]))
    assert got["probabilities"]["a"] == pytest.approx(want, abs=1e-12)


def test_control_tokens_in_a_raw_prompt_cut_exactly(decision_checkpoint):
    """Control tokens a template spells (added tokens of the vocabulary) are read as those tokens, and the
    questions fork right after the one that closes the state."""
    import dataclasses

    from flidec.frontend.parser import parse_spec

    ckpt = decision_checkpoint("standalone")
    tok = load_tokenizer(ckpt)
    fmt, _ = read_template(
        json.loads((ckpt / "decision_config.json").read_text()), ckpt, tok, source="decision_config.json"
    )
    fmt = dataclasses.replace(
        fmt,
        prompt="<|box_start|>{{ state_text }}<|box_end|>{{ question.instructions }}"
        "{% for o in options %} ({{ o.label }}) {{ o.key }}{% endfor %} Answer: (",
    )
    reading = DecisionReading(fmt, tok)
    spec = parse_spec(
        'model qwen3_5\nformat decision\ntree t (wire="systemone") {\n  state state: text[..64]\n'
        "  ask questions[1..4]: noul | choice[2..4]\n}\n",
        "t.flide",
    )
    plan, _ = reading.walker(spec.trees[0], verify=True).plan(
        {
            "state": "a.b",
            "questions": {
                "x": {"type": "noul", "instructions": "Yes?"},
                "y": {"type": "choice", "instructions": "Which?", "criteria": {"p": None, "q": None}},
            },
        }
    )
    root = plan.ids[0]
    assert root[0] == tok.token_to_id("<|box_start|>") and root[-1] == tok.token_to_id("<|box_end|>")
    assert len(plan.ids) == 3 and plan.parents == [-1, 0, 0]


def test_labels_for_in_a_template_names_the_question_s_labels(decision_checkpoint):
    import dataclasses

    from flidec.runtime.decision.render import Question, Renderer

    ckpt = decision_checkpoint("forms")
    tok = load_tokenizer(ckpt)
    fmt, _ = read_template(
        json.loads((ckpt / "decision_config.json").read_text()), ckpt, tok, source="decision_config.json"
    )
    fmt = dataclasses.replace(
        fmt,
        messages=(
            (
                "user",
                "{{ labels_for(question.type, options | length) | "
                "join(',') }}|{{ options | map(attribute='label') | join(',') }}",
            ),
        ),
    )
    q = Question("q", "choice", "?", {}, ("type",), tuple((f"o{i}", None) for i in range(30)))
    text = Renderer(fmt, tok).prompt("s", None, q, fmt.labels_for("choice", 30), [q])
    asked, shown = text.split("<|im_start|>user\n")[1].split("<|im_end|>")[0].split("|")
    assert asked == shown and asked.startswith("AA,AB,")


def test_long_texts_tokenize_in_runs_with_the_whole_prompt_s_ids(decision_checkpoint):
    """A long state is encoded as runs on every core; the walker's verify checks that every read's path
    ids still equal its whole prompt tokenized in one go."""
    from flidec.frontend.parser import parse_spec

    ckpt = decision_checkpoint("readout")
    reading = resolve_format(GENERIC, ckpt, load_tokenizer(ckpt)).fmt
    spec = parse_spec(
        'model qwen3_5\nformat decision\ntree t (wire="systemone") {\n  state state: text[..4096]\n'
        "  ask questions[1..4]: noul | choice[2..4]\n}\n",
        "t.flide",
    )
    words = " ".join(f"word{i % 97} and, more." for i in range(200))
    state = "\n".join([words, "line two <|im_start|> not a turn", words + "\n\n  indented", "end."])
    plan, _ = reading.walker(spec.trees[0], verify=True).plan(
        {
            "state": state,
            "questions": {
                "x": {"type": "noul", "instructions": "Yes?"},
                "y": {"type": "choice", "instructions": "Which?", "criteria": {"p": None, "q": None}},
            },
        }
    )
    assert len(plan.ids[0]) > 1000 and plan.parents == [-1, 0, 0]
    assert 0 < plan.state_end <= len(plan.ids[0])

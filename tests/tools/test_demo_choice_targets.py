"""Issue 7's choice path, end to end: a rendered choice decoded back to text must show, on the line of the
label the model is trained toward, the option the domain's rules make correct (read from the state itself,
not from the Example), and the label ids read must be that line's label tokens."""

from __future__ import annotations

import json
import random
import re
import string

import numpy as np
from demo_data import Example, noisy_label
from demo_domains import record
from demo_loop import noisy_targets
from demo_render import encode_examples

from flidec.models.tokenizer import load_tokenizer

_COUNTRY_KEYS = ("country", "ship_to", "destination")


def _record_choices(seed: int, count: int) -> list[tuple[Example, str]]:
    """Record-domain choices with the correct name taken from the JSON state's own field."""
    rng, out = random.Random(seed), []
    while len(out) < count:
        state, posed = record(rng)
        for p in posed:
            if p.question["type"] != "choice":
                continue
            asks_country = "ship" in p.question["instructions"] or "going" in p.question["instructions"]
            truth = next(state[k] for k in _COUNTRY_KEYS if k in state) if asks_country else state["status"]
            out.append((Example("record", state, p.question, p.answer, p.answer), truth))
    return out


def test_decoded_choice_target_line_names_the_rule_answer(render, demo_dir):
    tok = load_tokenizer(demo_dir)
    pairs = _record_choices(5, 40)
    enc = encode_examples(render, [ex for ex, _ in pairs])
    assert len({len(ex.question["criteria"]) for ex, _ in pairs}) > 3  # several option counts
    for i, (ex, truth) in enumerate(pairs):
        text = tok.decode(enc.prompt(i).tolist())
        state_text = text.split("user\n", 1)[1].split("\n\n", 1)[0]
        assert json.loads(state_text) == ex.state  # the state rendered is the state the rules read
        n = ex.options
        lines = dict(re.findall(r"^([A-Z]): (.*)$", text, flags=re.MULTILINE))
        assert list(lines) == list(string.ascii_uppercase[:n])
        target = int(enc.answers[i])
        label_text = tok.decode([int(enc.label_ids[i, target])])
        assert label_text == string.ascii_uppercase[target]
        assert lines[label_text] == truth, (text, target)
        assert list(enc.label_ids[i, :n]) == tok.encode("\n".join(string.ascii_uppercase[:n]))[::2]


def test_noise_redraw_keeps_most_choice_targets_and_never_leaves_the_options():
    answers = np.array([0, 3, 1, 25, 2] * 2000)
    options = np.array([2, 4, 3, 26, 3] * 2000)
    targets = noisy_targets(answers, options, 0.06, np.random.default_rng(0))
    assert 0.93 < (targets == answers).mean() < 0.95
    assert ((targets >= 0) & (targets < options)).all()
    rng = random.Random(0)
    assert all(0 <= noisy_label(rng, a, n, 0.5) < n
               for a, n in zip(answers[:500], options[:500], strict=True))

"""The demo tokenizer as flidec reads it: every label one token, prompt pieces adding up to whole prompts."""

from __future__ import annotations

import json
import string

from demo_render import encode_examples, set_examples
from demo_tokenizer import SPECIALS

from flidec.models.tokenizer import load_tokenizer


def test_every_label_is_one_distinct_token(render):
    labels = render.fmt.labels
    noul, score, choice = labels.noul(), labels.score(10), labels.choice(26)
    assert noul.texts == ("yes", "no") and score.texts == tuple(string.digits)
    assert choice.texts == tuple(string.ascii_uppercase)
    ids = noul.ids + score.ids + choice.ids
    assert len(set(ids)) == len(ids) == 38


def test_specials_and_chat_pieces(demo_dir):
    tok = load_tokenizer(demo_dir)
    assert [tok.special_tokens[s] for s in SPECIALS] == list(range(len(SPECIALS)))
    assert tok.eos_id == tok.special_tokens["<|im_end|>"]
    assert tok.pad_id == tok.special_tokens["<|endoftext|>"]
    assert tok.chat.before_user == "<|im_start|>user\n"
    assert tok.chat.generation_prompt == "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    config = json.loads((demo_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "TokenizersBackend" and "chat_template" in config
    # bound text never forges control tokens
    assert tok.encode("<|im_start|>") != [tok.special_tokens["<|im_start|>"]]


def test_pieces_equal_whole_prompt_tokenization(render):
    examples = set_examples(9, 300)
    enc = encode_examples(render, examples)
    for i, ex in enumerate(examples):
        whole = render.fmt.prompt_ids(ex.state, (), render.ask, ex.question, "questions.q")
        assert tuple(enc.prompt(i).tolist()) == whole


def test_option_ends_are_the_option_lines_last_tokens(render, demo_dir):
    tok = load_tokenizer(demo_dir)
    examples = [ex for ex in set_examples(10, 200) if ex.kind == "choice"]
    enc = encode_examples(render, examples)
    for i, ex in enumerate(examples):
        prompt, ends, n = enc.prompt(i).tolist(), enc.option_ends[i].tolist(), ex.options
        assert all(e == -1 for e in ends[n:]) and ends[:n] == sorted(ends[:n])
        text = tok.decode(prompt)
        lines = [tok.decode(prompt[:e + 1]).rsplit("\n", 2)[-2] for e in ends[:n]]
        assert [line.split(":", 1)[0] for line in lines] == list(string.ascii_uppercase[:n])
        assert all(tok.decode(prompt[e:e + 1]).endswith("\n") for e in ends[:n])
        assert lines[-1] + "\nAnswer with the letter" in text
    non_choice = encode_examples(render, [ex for ex in set_examples(10, 50) if ex.kind != "choice"])
    assert (non_choice.option_ends == -1).all()

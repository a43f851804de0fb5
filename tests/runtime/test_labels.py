"""Label strings and their single-token ids (real Qwen3.5 ids, and a toy vocabulary that lacks some)."""

from __future__ import annotations

import string

import pytest

from flidec.runtime.labels import MAX_CHOICE, LabelError, LabelTable


def test_qwen_labels_are_the_tokens_they_add_after_the_generation_prompt(qwen_tokenizer) -> None:
    table = LabelTable(qwen_tokenizer.encode, "\n\n")
    gen = qwen_tokenizer.encode("\n\n")
    for labels in (table.noul(), table.score(10), table.choice(MAX_CHOICE)):
        for text, tok in zip(labels.texts, labels.ids):
            assert qwen_tokenizer.encode("\n\n" + text) == gen + [tok]
    assert table.noul().texts == ("yes", "no")
    assert table.score(4).texts == ("0", "1", "2", "3")


def test_choice_labels_are_letters_then_two_letter_labels(qwen_tokenizer) -> None:
    table = LabelTable(qwen_tokenizer.encode, "\n\n")
    assert table.choice(3).texts == ("A", "B", "C")
    full = table.choice(MAX_CHOICE)
    assert full.texts[:26] == tuple(string.ascii_uppercase)
    assert full.texts[26:29] == ("AA", "AB", "AC")
    assert len(full.texts) == MAX_CHOICE and len(set(full.ids)) == MAX_CHOICE
    assert all(len(t) == 2 for t in full.texts[26:])
    assert table.choice(40).texts == full.texts[:40]


def _greedy(vocab: list[str]):
    """A toy encoder: greedy longest match over `vocab`, other characters as their code points + 1000."""
    ids = {v: i for i, v in enumerate(vocab)}

    def encode(text: str) -> list[int]:
        out, i = [], 0
        while i < len(text):
            for n in (2, 1):
                if text[i:i + n] in ids:
                    out.append(ids[text[i:i + n]])
                    i += n
                    break
            else:
                out.append(1000 + ord(text[i]))
                i += 1
        return out

    return encode


def test_two_letter_labels_that_are_not_single_tokens_are_skipped() -> None:
    vocab = ["\n\n", *string.ascii_uppercase, "AA", "AC", "AD"]  # no "AB"
    table = LabelTable(_greedy(vocab), "\n\n")
    assert table.choice(29).texts[26:] == ("AA", "AC", "AD")
    with pytest.raises(LabelError, match="29 options, not 30"):
        table.choice(30)


def test_labels_that_are_not_single_tokens_are_refused() -> None:
    table = LabelTable(_greedy(["\n\n", "y", "e", "s"]), "\n\n")  # "yes" would be three tokens
    with pytest.raises(LabelError, match="not single tokens"):
        table.noul()
    with pytest.raises(LabelError, match="2 to 10 levels"):
        table.score(11)

"""Label strings and their single-token ids (real Qwen3.5 ids, and a toy vocabulary that lacks some)."""

from __future__ import annotations

import string

import pytest

from flidec.runtime.labels import MAX_CHOICE, LabelError, LabelTable


def test_qwen_labels_are_the_tokens_they_add_after_the_generation_prompt(qwen_tokenizer) -> None:
    table = LabelTable(qwen_tokenizer.encode, "\n\n")
    gen = qwen_tokenizer.encode("\n\n")
    for labels in (table.noul(), table.score(10), table.choice(MAX_CHOICE)):
        for text, tok in zip(labels.texts, labels.ids, strict=True):
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


def test_label_sets_are_made_once_and_equal_a_fresh_tables(qwen_tokenizer) -> None:
    """A table keeps each label set it has checked (every ask of every instance asks again): the kept set is
    the one a fresh table makes, for every kind and count, and a set that failed is refused again."""
    calls: list[str] = []

    def encode(text: str) -> list[int]:
        calls.append(text)
        return qwen_tokenizer.encode(text)

    table = LabelTable(encode, "\n\n")
    asks = [("noul", 0), ("score", 4), ("score", 10), ("choice", 2), ("choice", 26), ("choice", 40)]

    def labels(t: LabelTable, kind: str, n: int):
        return t.noul() if kind == "noul" else t.score(n) if kind == "score" else t.choice(n)

    first = [labels(table, k, n) for k, n in asks]
    encoded = len(calls)
    again = [labels(table, k, n) for k, n in asks]
    assert len(calls) == encoded, "a kept set encoded its labels again"
    assert again == first
    assert [labels(LabelTable(qwen_tokenizer.encode, "\n\n"), k, n) for k, n in asks] == first
    table = LabelTable(_greedy(["\nA", "B", "C"]), "\n")  # "A" merges with the tail: not a token of its own
    for _ in range(2):
        with pytest.raises(LabelError, match=r"labels \['A'\] are not single tokens"):
            table.choice(3)

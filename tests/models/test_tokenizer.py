"""ModelTokenizer.encode_batch: the ids of each text exactly as `encode` gives them one at a time (literal:
special-token spellings stay text), for the strings that stress a tokenizer."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

TRICKY = [
    "", " ", "\n", "\n\n", " \t \n", "\u00a0\u3000\u2028\u0085",  # empty and whitespace only
    "<|im_start|>user\nhi<|im_end|>\n", "<think>\n\n</think>\n\n", "<|endoftext|>", "<|im_", "|>",  # specials
    "e\u0301 caf\u00e9 \u1100\u1161 한국어 東京 🙂 \u0301",  # NFC, CJK, emoji
    "\r\n\r\n x\n\ty",
    "It's we'll 3.14 x=1; (see) — …",
    "A long line without a newline. " * 2000,
    "A paragraph.\nAnother one, with <|im_start|> in it.\n\n  indented\n" * 700,
]


def test_encode_batch_is_encode_of_each_text(qwen_tokenizer) -> None:
    assert qwen_tokenizer.encode_batch(TRICKY) == [qwen_tokenizer.encode(t) for t in TRICKY]
    assert qwen_tokenizer.encode_batch([]) == []
    (ids,) = qwen_tokenizer.encode_batch(["<|im_start|>"])
    assert qwen_tokenizer.special_tokens["<|im_start|>"] not in ids and len(ids) > 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=8))
def test_encode_batch_of_any_texts(qwen_tokenizer, texts) -> None:
    assert qwen_tokenizer.encode_batch(texts) == [qwen_tokenizer.encode(t) for t in texts]

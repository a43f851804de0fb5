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


def test_cuts_are_exact_for_the_qwen_split_only(qwen_tokenizer) -> None:
    """Runs cut at newlines and at spaces between letters (runtime/next_token.text_runs) only for the splits
    whose cuts keep the ids; any other pipeline encodes each text whole."""
    import json

    from tokenizers import Regex, Tokenizer, pre_tokenizers

    from flidec.models.tokenizer import _cuts_exact

    assert qwen_tokenizer.cuts_exact
    base = json.loads(qwen_tokenizer._literal.to_str())

    def variant(edit) -> Tokenizer:
        spec = json.loads(json.dumps(base))
        edit(spec)
        return Tokenizer.from_str(json.dumps(spec))

    assert _cuts_exact(variant(lambda s: None))
    gpt2_like = variant(lambda s: s.update(pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False,
                                                          "trim_offsets": True, "use_regex": True}))
    assert not _cuts_exact(gpt2_like)
    other = variant(lambda s: None)
    other.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\w+\s?|\S"), "isolated"),
                                                   pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                            use_regex=False)])
    assert not _cuts_exact(other)  # a space kept with the word before it: a cut before it would split it
    assert not _cuts_exact(variant(lambda s: s["model"].update(dropout=0.1)))
    assert not _cuts_exact(variant(lambda s: s.update(normalizer={"type": "NFKC"})))

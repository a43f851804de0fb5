"""flidec.models.tokenizer: load_tokenizer on checkpoint directories, chat pieces, literal encoding,
errors."""

from __future__ import annotations

import json
import shutil

import pytest

from flidec.ir.errors import ModelError
from flidec.models.tokenizer import ChatPieces, load_tokenizer
from flidec.testing.corpus import CORPUS


def _tokenizer_dir(tiny_checkpoint, tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_checkpoint / name, d)
    return d


def test_ids_and_lookups(qwen_tokenizer):
    assert qwen_tokenizer.vocab_size == 248_077
    assert qwen_tokenizer.eos_id == 248_046 and qwen_tokenizer.pad_id == 248_044
    assert qwen_tokenizer.token_to_id("<|im_start|>") == 248_045
    assert qwen_tokenizer.id_to_token(248_069) == "</think>"
    assert qwen_tokenizer.special_tokens["<|endoftext|>"] == 248_044
    assert qwen_tokenizer.encode("Hello world") == [9419, 1814]


@pytest.mark.parametrize("text", [t for t in CORPUS if "<" not in t])
def test_literal_and_template_encoding_agree_without_specials(qwen_tokenizer, text):
    ids = qwen_tokenizer.encode(text)
    assert ids == qwen_tokenizer.encode_template(text)
    assert all(i < 248_044 for i in ids)


def test_user_text_never_becomes_a_special_token(qwen_tokenizer):
    text = "<|im_end|>\n<|im_start|>assistant\n<think>"
    ids = qwen_tokenizer.encode(text)
    assert not set(ids) & set(qwen_tokenizer.special_tokens.values())
    assert qwen_tokenizer.decode(ids) == text
    assert qwen_tokenizer.encode_template(text) == [248_046, 198, 248_045, 74_455, 198, 248_068]


def test_chat_pieces(qwen_tokenizer):
    assert qwen_tokenizer.chat == ChatPieces(
        before_user="<|im_start|>user\n",
        after_user="<|im_end|>\n",
        generation_prompt="<|im_start|>assistant\n<think>\n\n</think>\n\n",
    )


@pytest.mark.parametrize("text", ["Is the sky blue?", "  spaced  \n\nout\n", '状态: {"a": 1}'])
def test_chat_pieces_render_like_apply_chat_template(hf_qwen_tokenizer, qwen_tokenizer, text):
    expected = hf_qwen_tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert qwen_tokenizer.chat.render(text) == expected


def test_load_is_cached_per_directory(tiny_checkpoint):
    # two loads in a row: the cache keeps 8 directories, and other tests load many (a session fixture's
    # tokenizer may be gone by the time this runs)
    first = load_tokenizer(tiny_checkpoint)
    assert load_tokenizer(tiny_checkpoint) is first
    assert load_tokenizer(str(tiny_checkpoint) + "/.") is first  # the same directory, spelled otherwise


def test_chat_template_file_takes_precedence(tiny_checkpoint, tmp_path):
    d = _tokenizer_dir(tiny_checkpoint, tmp_path)
    (d / "chat_template.jinja").write_text(
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}[/]{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    assert load_tokenizer(d).chat == ChatPieces("[user]", "[/]", "[assistant]")


def test_missing_files_raise_model_error(tiny_checkpoint, tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        load_tokenizer(tmp_path / "nowhere")
    with pytest.raises(ModelError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelError, match="cannot load"):
        load_tokenizer(tmp_path)


def test_missing_chat_template_raises_on_use(tiny_checkpoint, tmp_path):
    d = _tokenizer_dir(tiny_checkpoint, tmp_path)
    config = json.loads((tiny_checkpoint / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    tok = load_tokenizer(d)
    assert tok.encode("hi") == [5834]
    with pytest.raises(ModelError, match="no chat template"):
        _ = tok.chat


def test_template_that_drops_the_user_message_is_refused(tiny_checkpoint, tmp_path):
    d = _tokenizer_dir(tiny_checkpoint, tmp_path)
    (d / "chat_template.jinja").write_text("{% if add_generation_prompt %}go{% endif %}")
    with pytest.raises(ModelError, match="cannot cut it"):
        load_tokenizer(d)

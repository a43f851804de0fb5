"""The tokenizer files a test checkpoint ships, read back through transformers (what vLLM uses)."""

from __future__ import annotations

import pytest

from flidec.testing.corpus import CORPUS


def test_auto_tokenizer_is_qwen35(hf_qwen_tokenizer):
    assert type(hf_qwen_tokenizer).__name__ == "Qwen3_5Tokenizer"
    assert hf_qwen_tokenizer.eos_token == "<|im_end|>" and hf_qwen_tokenizer.eos_token_id == 248_046
    assert hf_qwen_tokenizer.pad_token == "<|endoftext|>" and hf_qwen_tokenizer.pad_token_id == 248_044


@pytest.mark.parametrize("text", [*CORPUS, "加拿大和新加坡的俱乐部"])
def test_auto_tokenizer_ids_equal_tokenizer_json(hf_qwen_tokenizer, qwen_tokenizer, text):
    assert hf_qwen_tokenizer.encode(text, add_special_tokens=False) == qwen_tokenizer.encode_template(text)


def _chat(hf_qwen_tokenizer, messages, **kwargs) -> str:
    return hf_qwen_tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)


def test_generation_prompt_thinking_off(hf_qwen_tokenizer):
    text = _chat(
        hf_qwen_tokenizer,
        [{"role": "user", "content": "Is it?"}],
        add_generation_prompt=True,
        enable_thinking=False,
    )
    assert text == "<|im_start|>user\nIs it?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_generation_prompt_thinking_on_by_default(hf_qwen_tokenizer):
    messages = [{"role": "user", "content": "Is it?"}]
    expected = "<|im_start|>user\nIs it?<|im_end|>\n<|im_start|>assistant\n<think>\n"
    assert _chat(hf_qwen_tokenizer, messages, add_generation_prompt=True) == expected
    assert _chat(hf_qwen_tokenizer, messages, add_generation_prompt=True, enable_thinking=True) == expected


def test_multi_turn_and_content_parts(hf_qwen_tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Q1"}, {"type": "text", "text": " more"}]},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nA1"},
        {"role": "user", "content": "Q2"},
    ]
    assert _chat(hf_qwen_tokenizer, messages) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nQ1 more<|im_end|>\n"
        "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
    )

"""A varied text corpus for tokenizer tests.

CORPUS holds prose, code, JSON, CJK, emoji, NFC cases, whitespace runs, numbers and special-token spellings.
It is plain data, used by tests that compare tokenizations.
"""

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see, they'd go, DON'T SHOUT.",
    "def f(x: int) -> dict[str, int]:\n    return {'a': x ** 2}  # square\n\n\nclass A(B):\n\tpass\n",
    '{"id": 17, "name": "Zoë", "tags": ["a", "b"], "nested": {"pi": 3.14159, "ok": true, "none": null}}',
    "机器学习是人工智能的一个分支。我们今天去北京大学参观。日本語のテキストも少し。한국어 문장입니다.",
    "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️‍🔥 🫠 ✅ — and a lone variation selector ☺︎.",
    # NFC: decomposed sequences (e + U+0301, Hangul jamo) must encode as their composed forms
    (
        "Cafe\u0301 vs Café; \u1100\u1161\u11a8 vs 각; A\u030a vs Å; Tiếng Việt có dấu; "
        "x\u0308y stays decomposed"
    ),
    "Combining marks after letters: ab\u0301c, Devanagari \u0915\u093f\u0924\u093e\u092c, Thai สวัสดีครับ",
    "Arabic: مرحبا بالعالم. Hebrew: שלום עולם. Cyrillic: Привет, мир! Greek: Καλημέρα κόσμε.",
    "spaces:    four, tabs:\t\t\ttwo+, trailing   \n\n\n\nnewlines\r\nCRLF\r\n\r\n  indented\n        deep",
    "numbers: 1234567890 3.14159 -42 1,000,000 0x1F 1e-9 2024-06-01 12:30:45 ½ ٣٤٥ ①②",
    (
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n\n</think>\n\nHello!<|im_end|><|endoftext|>"
    ),
    'special glued:<|im_end|>x<tool_call>{"a":1}</tool_call><|vision_start|><|image_pad|><|vision_end|>',
    "Punctuation!!! ??? ... --- *** ``` ~~~ @@@ ### $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} ||| \\\\ ///",
    "",
    " ",
    "a",
    "\n",
    "URL https://example.com/path?q=1&r=two#frag and email someone@example.org",
]

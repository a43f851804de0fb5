"""A model directory's tokenizer, as the rest of flidec uses it.

Consumes a directory's tokenizer.json (through `tokenizers`: the runtime needs no transformers for this) and
its chat template; produces a ModelTokenizer: literal and template encodes, decode, token lookups and the chat
pieces formats need. Failures raise ModelError.

Bound text is encoded literally: a text that spells a special token (say "<|im_start|>") becomes the ordinary
tokens of those characters, so an instance cannot forge turn structure; only the template's own text goes
through `encode_template`.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tokenizers import Tokenizer

from flidec.ir.errors import ModelError

# A user message no template rewrites: ASCII letters only, so trim/escape filters leave it alone.
_MARKER = "FLIDECUSERMESSAGEMARKER"
# The pre-tokenizer splits of Qwen2 to Qwen3 and of Qwen3.5 (letters and marks), for which a text cut right
# after a newline that non-whitespace follows, or right before a space between two letters, encodes to the
# ids of the whole (ModelTokenizer.cuts_exact): no alternative matches a newline and then non-whitespace, or
# a letter and then a space; none looks behind, so the scan after a cut matches what the whole text's scan
# matches there; NFC composes nothing with a newline or a space; byte-level BPE encodes each pre-token alone.
_CUT_SAFE_SPLITS = frozenset({
    (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
     r"|\s+(?!\S)|\s+"),
    (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
     r"|\s*[\r\n]+|\s+(?!\S)|\s+"),
})


@dataclass(frozen=True, slots=True)
class ChatPieces:
    """How a single-user-turn prompt is laid out: before + user text + after + generation_prompt."""

    before_user: str
    after_user: str
    generation_prompt: str  # thinking off, e.g. "<|im_start|>assistant\n<think>\n\n</think>\n\n"

    def render(self, user_text: str) -> str:
        return self.before_user + user_text + self.after_user + self.generation_prompt


class ModelTokenizer:
    """One directory's tokenizer. Immutable after load; safe to share between threads."""

    def __init__(self, path: Path, tokenizer_json: str, config: dict, chat_template: str | None):
        self.path = path
        self._full = Tokenizer.from_str(tokenizer_json)
        # Same pipeline with special tokens matched as plain text (see the module docstring).
        self._literal = Tokenizer.from_str(tokenizer_json)
        self._literal.encode_special_tokens = True
        self.special_tokens: dict[str, int] = {
            t.content: i for i, t in self._full.get_added_tokens_decoder().items() if t.special
        }
        self.vocab_size: int = self._full.get_vocab_size(with_added_tokens=True)
        self.eos_id = self._special_id(config, "eos_token")
        self.pad_id = self._special_id(config, "pad_token")
        self.cuts_exact = _cuts_exact(self._literal)
        # added tokens (special or not) that `encode_template` splits out before anything else and that take
        # no neighbouring whitespace: a cut right before or after one keeps a text's ids
        self.added_tokens: tuple[str, ...] = tuple(
            t.content for t in self._full.get_added_tokens_decoder().values()
            if not (t.lstrip or t.rstrip or t.single_word))
        self.chat_template = chat_template
        self._template_specials = _template_specials(config)
        self._chat = _chat_pieces(chat_template, config, path) if chat_template is not None else None

    def encode(self, text: str) -> list[int]:
        """Ids of `text` taken literally: special-token spellings stay ordinary text."""
        return self._literal.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of each text, in one call: the library encodes a batch on all cores and, in its `_fast`
        form, computes no character offsets, which nothing here reads (the ids are the same)."""
        return [e.ids for e in self._literal.encode_batch_fast(list(texts), add_special_tokens=False)]

    def encode_template(self, text: str) -> list[int]:
        """Ids of template text, in which special-token spellings are the special tokens."""
        return self._full.encode(text, add_special_tokens=False).ids

    def encode_template_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode_template` of each text, in one call (on all cores)."""
        return [e.ids for e in self._full.encode_batch_fast(list(texts), add_special_tokens=False)]

    def render_chat(self, messages: list[dict], *, thinking: bool) -> str:
        """The chat template applied to `messages` with the generation prompt, as transformers'
        apply_chat_template(tokenize=False, add_generation_prompt=True, enable_thinking=thinking) does."""
        if self.chat_template is None:
            self.chat  # noqa: B018 (raises the ModelError that says the template is missing)
        return render_chat_template(self.chat_template, messages, add_generation_prompt=True,  # type: ignore[arg-type]
                                    special_tokens=self._template_specials, enable_thinking=thinking)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._full.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._full.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._full.id_to_token(token_id)

    @property
    def chat(self) -> ChatPieces:
        if self._chat is None:
            raise ModelError(
                f"{self.path} has no chat template (chat_template.jinja or tokenizer_config.json "
                "`chat_template`); flidec renders chat models' prompts with it"
            )
        return self._chat

    def _special_id(self, config: dict, key: str) -> int | None:
        token = config.get(key)
        if isinstance(token, dict):
            token = token.get("content")
        if token is None:
            return None
        token_id = self._full.token_to_id(token)
        if token_id is None:
            raise ModelError(f"{self.path}/tokenizer_config.json: {key} {token!r} is not in tokenizer.json")
        return token_id


def _cuts_exact(tok: Tokenizer) -> bool:
    """Whether cutting a text after a newline before non-whitespace, or before a space between two letters,
    keeps its ids (_CUT_SAFE_SPLITS): NFC or no normalizer, a Qwen split then the byte-level mapping, BPE
    without dropout, and no added token that plain text can hold (not special) with whitespace in it."""
    def state(component) -> dict:
        return json.loads(component.__getstate__()) if component is not None else {}

    pre = state(tok.pre_tokenizer)
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if len(steps) != 2:
        return False
    split, byte_level = steps
    return (state(tok.normalizer) in ({}, {"type": "NFC"})
            and split.get("type") == "Split" and split.get("behavior") == "Isolated"
            and not split.get("invert")
            and split.get("pattern", {}).get("Regex") in _CUT_SAFE_SPLITS
            and byte_level.get("type") == "ByteLevel" and not byte_level.get("use_regex")
            and not byte_level.get("add_prefix_space")
            and type(tok.model).__name__ == "BPE" and tok.model.dropout is None
            and not any(any(c.isspace() for c in t.content)
                        for t in tok.get_added_tokens_decoder().values() if not t.special))


def load_tokenizer(model_dir: str | os.PathLike[str]) -> ModelTokenizer:
    """The tokenizer of a local model directory; loads are cached per directory and file version."""
    path = Path(model_dir).expanduser().resolve()
    if not path.is_dir():
        raise ModelError(f"model directory {model_dir} does not exist")
    tokenizer_file = path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise ModelError(
            f"{path} has no tokenizer.json; flidec reads the fast-tokenizer file (save the "
            "tokenizer with transformers' save_pretrained to write one)"
        )
    stamps = tuple(
        _stamp(path / f) for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
    )
    return _load(path, stamps)


@functools.lru_cache(maxsize=8)
def _load(path: Path, stamps: tuple) -> ModelTokenizer:
    config: dict = {}
    config_file = path / "tokenizer_config.json"
    if config_file.is_file():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ModelError(f"{config_file}: not readable JSON ({e})") from e
    try:
        tokenizer_json = (path / "tokenizer.json").read_text(encoding="utf-8")
        return ModelTokenizer(path, tokenizer_json, config, _chat_template(path, config))
    except ModelError:
        raise
    except Exception as e:  # the tokenizers library raises bare Exceptions on malformed files
        raise ModelError(f"{path}/tokenizer.json: cannot load ({e})") from e


def _stamp(file: Path) -> tuple[int, int] | None:
    try:
        st = file.stat()
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size


def _chat_template(path: Path, config: dict) -> str | None:
    # transformers 5 writes the template to chat_template.jinja and prefers that file when present.
    jinja_file = path / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def render_chat_template(
    template: str,
    messages: list[dict],
    *,
    add_generation_prompt: bool,
    special_tokens: dict[str, str] | None = None,
    **kwargs,
) -> str:
    """Render a chat template as transformers' apply_chat_template(tokenize=False) does."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
        # jinja's own tojson escapes HTML characters; transformers' does not
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **(special_tokens or {}), **kwargs
        )
    except jinja2.TemplateError as e:
        raise ModelError(f"chat template failed to render: {e}") from e


def _template_specials(config: dict) -> dict[str, str | None]:
    """The special tokens a chat template may name (bos_token, ...), from tokenizer_config.json."""
    specials = {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = config.get(key)
        specials[key] = value.get("content") if isinstance(value, dict) else value
    return specials


def _chat_pieces(template: str, config: dict, path: Path) -> ChatPieces:
    """The text around a single user message and the generation prompt with thinking off, found by
    rendering the template (transformers' apply_chat_template semantics) on a marker message and cutting
    at the marker."""
    specials = _template_specials(config)
    messages = [{"role": "user", "content": _MARKER}]
    turn = render_chat_template(
        template, messages, add_generation_prompt=False, special_tokens=specials, enable_thinking=False
    )
    prompt = render_chat_template(
        template, messages, add_generation_prompt=True, special_tokens=specials, enable_thinking=False
    )
    if turn.count(_MARKER) != 1 or not prompt.startswith(turn):
        raise ModelError(
            f"{path}: the chat template does not render a user message once, followed by the "
            "generation prompt; flidec cannot cut it into prompt pieces"
        )
    before, after = turn.split(_MARKER)
    return ChatPieces(before_user=before, after_user=after, generation_prompt=prompt[len(turn) :])

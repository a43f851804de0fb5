"""Addresses of saved points: a state's token prefix, hashed block by block, scoped by what fixes its bits.

A point of `length` positions is addressed by the chain hash of its first length // BLOCK blocks of token
ids, each block hashed with the hash before it, starting from the scope: the artifact's model, tokenizer,
spec and files and the engine that computes the bits (its kind and dtype). Two prefixes share a key only if
they share every token (up to a hash collision, which a lookup rules out by comparing the tokens), and a
point made for another model, artifact or engine never answers to this one's keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from flidec.runtime.meta import CHUNK

BLOCK = CHUNK  # positions per hashed block: saved points sit on its multiples
FORMAT = 3  # the saved-point format: a checkpoint of another is refused


def scope_of(manifest: Mapping[str, Any], engine: str) -> str:
    """The hex scope of an artifact's saved points on one engine ("reference:float32", "graph:sm_90")."""
    model = manifest["model"]
    fields = {"format": FORMAT, "engine": engine, "spec": manifest["spec"]["sha256"],
              "config": model["config_sha256"], "tokenizer": model["tokenizer_sha256"],
              "weights": model["weights_sha256"], "files": manifest["files"], "target": manifest["target"]}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def prefix_keys(scope: str, tokens: Sequence[int] | np.ndarray, blocks: int) -> list[str]:
    """The keys of the prefixes of 1 .. `blocks` whole blocks of `tokens` (hex, 32 digits each)."""
    ids = np.asarray(tokens, dtype=np.int64)
    assert blocks * BLOCK <= len(ids), "a key covers whole blocks of the tokens"
    return chain_keys(bytes.fromhex(scope),
                      (ids[b * BLOCK : (b + 1) * BLOCK].tobytes() for b in range(blocks)))


def chain_keys(seed: bytes, blocks: Iterable[bytes]) -> list[str]:
    """Each block's key chained on the one before (the first on `seed`): a key names its whole prefix, so
    equal keys mean equal prefixes (hex, 32 digits each)."""
    out, h = [], seed
    for block in blocks:
        h = hashlib.blake2b(h + block, digest_size=16).digest()
        out.append(h.hex())
    return out

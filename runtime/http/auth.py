"""Bearer keys: which requests the server answers.

Consumes `--api-key` values and `--api-key-file` lines; produces a Keys check that raises ApiError 401 with
the `authentication_error` shape for a missing or wrong key. With no keys configured every request is
accepted, with or without an Authorization header (the SDKs always send one). Keys are compared in constant
time, and never logged or echoed.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from pathlib import Path

from flidec.ir.errors import FlideError
from flidec.runtime.http.errors import ApiError

CHALLENGE = {"WWW-Authenticate": 'Bearer realm="flidec"'}


class Keys:
    def __init__(self, keys: Iterable[str] = ()):
        self._keys = [k.encode("utf-8") for k in keys]
        if any(not k or k != k.strip() for k in self._keys):
            raise FlideError("an API key is empty or has spaces around it: write each key as one token")

    @classmethod
    def load(cls, keys: Iterable[str] = (), files: Iterable[str | Path] = ()) -> Keys:
        """Keys given on the command line, plus one key a line of each file (blank lines and `#` lines
        skipped)."""
        found = list(keys)
        for f in files:
            for line in Path(f).read_text(encoding="utf-8").splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    found.append(line)
        if (list(files) or list(keys)) and not found:
            raise FlideError("the API key file holds no key: write one key a line")
        return cls(found)

    @property
    def required(self) -> bool:
        return bool(self._keys)

    def check(self, authorization: str | None) -> None:
        """Return if the request may be answered; raise ApiError 401 if not."""
        if not self._keys:
            return
        if not authorization:
            raise ApiError(401, "authentication_error", "no API key: send it as `Authorization: Bearer KEY`",
                           CHALLENGE)
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "authentication_error", "the Authorization header is not `Bearer KEY`",
                           CHALLENGE)
        given = token.strip().encode("utf-8")
        ok = False
        for key in self._keys:  # every key compared: the time does not say which one nearly matched
            ok |= hmac.compare_digest(given, key)
        if not ok:
            raise ApiError(401, "authentication_error", "the API key is not valid", CHALLENGE)

"""Request bodies: read within a size limit and a time limit, decoded (zstd, gzip), parsed as strict JSON.

Consumes the ASGI request; produces the parsed JSON value (objects as ir/instance.py's JsonObject, duplicate
keys kept for its checks) or raises ApiError: 413 past `max_bytes` (on the wire or once decoded, so a small
compressed bomb is refused as it inflates), 408 when the client stops sending, 415 for an encoding not read
here, 400 for a body that does not decode, 422 (`detail[]`) for what is not JSON. The official System One
SDK sends `Content-Encoding: zstd` for bodies of 1 KiB or more.
"""

from __future__ import annotations

import asyncio
import sys
import zlib
from typing import Any

from starlette.requests import ClientDisconnect, Request

from flidec.ir.errors import InstanceError
from flidec.ir.instance import loads_instance
from flidec.runtime.http.errors import ApiError, ValidationFailed

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

CHUNK = 1 << 16  # bytes a decoder may produce per step, so a bomb is stopped near the limit


def _too_large(limit: int, what: str) -> ApiError:
    return ApiError(413, "request_too_large", f"the request body is over {limit} bytes {what}; send a "
                    "smaller request or start the server with a larger --max-body-bytes")


async def read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    """The raw body as sent, refused past `max_bytes` (Content-Length first) or `timeout_s` of reading."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes, f"(Content-Length {declared})")
    parts: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise _too_large(max_bytes, "as sent")
            parts.append(chunk)

    try:
        await asyncio.wait_for(collect(), timeout_s)
    except TimeoutError:
        raise ApiError(408, "timeout_error", f"the request body did not arrive within {timeout_s:g} s "
                       f"({size} bytes came)") from None
    except ClientDisconnect:
        raise ApiError(400, "invalid_request_error",
                       "the client went away before its body was read") from None
    return b"".join(parts)


def decode(body: bytes, encoding: str | None, max_bytes: int) -> bytes:
    """The body with its Content-Encoding undone (codings listed in the order applied, undone last first)."""
    if not encoding:
        return body
    for coding in reversed([c.strip().lower() for c in encoding.split(",") if c.strip()]):
        if coding == "identity":
            continue
        if coding == "zstd":
            body = _inflate(body, zstd.ZstdDecompressor(), "zstd", max_bytes)
        elif coding in ("gzip", "x-gzip"):
            body = _inflate(body, zlib.decompressobj(16 + zlib.MAX_WBITS), "gzip", max_bytes)
        elif coding == "deflate":
            body = _inflate(body, zlib.decompressobj(), "deflate", max_bytes)
        else:
            raise ApiError(415, "unsupported_media_type", f"Content-Encoding {coding!r} is not read here: "
                           "send zstd, gzip, deflate or an uncompressed body")
    return body


def _inflate(data: bytes, decoder: Any, name: str, max_bytes: int) -> bytes:
    """Decode in steps of at most CHUNK bytes out: zlib hands back the input it did not reach
    (unconsumed_tail), zstd keeps it inside (needs_input False)."""
    out: list[bytes] = []
    size = 0
    pending = data
    try:
        while True:
            chunk = decoder.decompress(pending, max_length=CHUNK)
            size += len(chunk)
            if size > max_bytes:
                raise _too_large(max_bytes, f"once {name}-decoded")
            out.append(chunk)
            if decoder.eof:
                break
            if hasattr(decoder, "unconsumed_tail"):
                pending = decoder.unconsumed_tail
                more = bool(pending) or bool(chunk)
            else:
                pending = b""
                more = not decoder.needs_input
            if not more:
                break
    except (zlib.error, zstd.ZstdError, EOFError) as e:
        raise ApiError(400, "invalid_request_error", f"the body is not valid {name} data ({e})") from None
    if not decoder.eof:
        raise ApiError(400, "invalid_request_error", f"the {name} body ends before its data does")
    return b"".join(out)


def parse_json(body: bytes) -> Any:
    """Strict JSON (UTF-8, no NaN or Infinity, bounded nesting and integers), or 422 in `detail[]`."""
    if not body.strip():
        raise ValidationFailed([{"loc": ["body"], "msg": "the request body is empty; send a JSON object",
                                 "type": "missing"}])
    try:
        return loads_instance(body)
    except InstanceError as e:
        detail = [{"loc": ["body"], "msg": p, "type": "json_invalid"} for p in e.problems]
        raise ValidationFailed(detail) from None

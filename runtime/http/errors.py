"""The error shapes the server answers with, and which status a runtime error record gets.

Validation failures: 422 `{"detail": [{"loc": ["body", ...], "msg", "type"}]}` (FastAPI's shape, what the
System One SDKs parse); every other error: `{"detail": {"error_type", "message"}}`. Consumes the runtime's
problem strings (`path: message`, paths as ir/instance.py writes them) and error records; produces
ApiError, which app.py turns into a JSON response. A bad request never gets a 5xx: the SDKs retry those.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

# Problems the runtime reports when an instance is over a token or size bound of the artifact (ir/instance.py
# byte bounds, runtime/templates.py compiled bounds, runtime/split.py a path over the largest bucket): 413,
# not 422. tests/serve/test_serve_errors.py holds these phrases to the runtime's messages.
OVER_BOUND = ("bytes, more than its bound", "over the compiled bound", "its path alone needs",
              "tokens over its bound")


class ApiError(Exception):
    """An HTTP error answer: status, body and headers (Retry-After, WWW-Authenticate)."""

    def __init__(self, status: int, error_type: str, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.headers = dict(headers or {})

    @property
    def body(self) -> dict:
        return {"detail": {"error_type": self.error_type, "message": self.message}}


class ValidationFailed(ApiError):
    """422 with `detail[]`: one entry per problem."""

    def __init__(self, detail: Sequence[dict]):
        super().__init__(422, "validation_error", "; ".join(d["msg"] for d in detail))
        self.detail = list(detail)

    @property
    def body(self) -> dict:
        return {"detail": self.detail}


def invalid(loc: Sequence[str | int], msg: str, kind: str = "value_error") -> ValidationFailed:
    """One validation problem at `loc` (below "body")."""
    return ValidationFailed([{"loc": ["body", *loc], "msg": msg, "type": kind}])


def retry_headers(seconds: float) -> dict[str, str]:
    """Retry-After in whole seconds (at least 1, what HTTP allows) and retry-after-ms, which the SDKs read
    first."""
    return {"Retry-After": str(max(1, math.ceil(seconds))),
            "retry-after-ms": str(max(1, round(seconds * 1000)))}


def over_bound(problems: Sequence[str]) -> bool:
    return any(marker in p for p in problems for marker in OVER_BOUND)


def from_problems(problems: Sequence[str], prefix: Sequence[str | int] = ()) -> ApiError:
    """The answer to an instance the runtime refused: 413 when a problem is a bound, else 422 per problem."""
    if over_bound(problems):
        return ApiError(413, "request_too_large", "; ".join(problems))
    return ValidationFailed([_detail(p, prefix) for p in problems])


def from_record(record: Mapping) -> ApiError:
    """The answer to a runtime error record `{"error": {"type", "problems"}}` of a request that was run."""
    error = record["error"]
    problems = [str(p) for p in error.get("problems", [])]
    kind = error.get("type", "")
    if kind == "DeadlineExceeded":
        return ApiError(503, "overloaded_error", "; ".join(problems), retry_headers(1.0))
    if kind in ("InstanceError",):
        return from_problems(problems)
    return ApiError(500, "internal_error", f"{kind}: {'; '.join(problems)}")


def _detail(problem: str, prefix: Sequence[str | int]) -> dict:
    loc, msg = split_path(problem)
    if msg.startswith("missing"):
        kind = "missing"
    elif msg.startswith("unknown field"):
        kind = "extra_forbidden"
    elif msg.startswith("expected") or msg.startswith("must be"):
        kind = "type_error"
    else:
        kind = "value_error"
    return {"loc": ["body", *prefix, *loc], "msg": msg, "type": kind}


def split_path(problem: str) -> tuple[list[str | int], str]:
    """`questions["a b"].criteria[2]: message` -> (["questions", "a b", "criteria", 2], "message"); a problem
    whose start is no path (or names the whole instance) -> ([], problem)."""
    loc: list[str | int] = []
    i, n = 0, len(problem)
    decoder = json.JSONDecoder()
    while i < n:
        c = problem[i]
        if c == "[":
            if problem.startswith('["', i) or problem.startswith("['", i):
                try:
                    key, end = decoder.raw_decode(problem, i + 1)
                except json.JSONDecodeError:
                    return [], problem
                if not problem.startswith("]", end):
                    return [], problem
                loc.append(key)
                i = end + 1
            else:
                end = problem.find("]", i)
                if end < 0 or not problem[i + 1:end].isdigit():
                    return [], problem
                loc.append(int(problem[i + 1:end]))
                i = end + 1
        elif c == ".":
            i += 1
        elif problem.startswith(": ", i):
            if not loc or loc == ["instance"]:
                return [], problem[i + 2:] if loc else problem
            return loc, problem[i + 2:]
        else:
            j = i
            while j < n and (problem[j].isalnum() or problem[j] == "_"):
                j += 1
            if j == i:
                return [], problem
            loc.append(problem[i:j])
            i = j
    return [], problem


def is_record(result: object) -> bool:
    """Whether a Program result is an error record `{"error": {"type", "problems"}}` (an answer object of a
    tree with an ask named `error` holds no `problems`)."""
    return (isinstance(result, Mapping) and len(result) == 1 and isinstance(result.get("error"), Mapping)
            and "problems" in result["error"])


def checked(result: dict) -> dict:
    """The answer object, or the ApiError its error record maps to."""
    if is_record(result):
        raise from_record(result)
    return result

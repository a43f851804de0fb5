"""What jevcompat does not send: broken and hostile bodies get a 4xx in the documented shapes, never a 5xx
(the SDKs retry those) or a hang, and the server answers the next good request as before. Broken JSON,
wrong types, invalid UTF-8, lone surrogates, duplicate keys, NaN, huge integers, 256 options, 10,000 levels
of nesting, bodies over the limit (declared, chunked, or a small zstd bomb), unknown and corrupt encodings,
a client that stops sending its body, and texts over the artifact's token bounds (413).
"""

from __future__ import annotations

import gzip
import json
import socket
import sys
import time

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

GOOD = {"model": "jev-latest", "state": "I was charged twice.",
        "questions": {"q": {"type": "noul", "instructions": "Refund?"}}}
LIMIT = 64 << 10  # the test server's body limit


def q(question: object) -> dict:
    return {**GOOD, "questions": {"q": question}}


CASES: dict[str, tuple[bytes | object, int]] = {
    "broken json": (b'{"state": "x", "questions": {', 422),
    "trailing garbage": (json.dumps(GOOD).encode() + b" }", 422),
    "empty body": (b"", 422),
    "array body": ([GOOD], 422),
    "string body": ("just text", 422),
    "invalid utf-8": (b'{"state": "caf\xe9", "questions": {"q": {"type": "noul"}}}', 422),
    "lone surrogate": (b'{"state": "\\ud800", "questions": {"q": {"type": "noul"}}}', 422),
    "duplicate keys": (b'{"state": "a", "state": "b", "questions": {"q": {"type": "noul"}}}', 422),
    "nan": (b'{"state": "a", "questions": {"q": {"type": "noul"}}, "x": NaN}', 422),
    "huge integer": (b'{"state": "a", "questions": {"q": {"type": "noul"}}, "x": 1' + b"0" * 5000 + b"}",
                     422),
    "state a number": ({**GOOD, "state": 7}, 422),
    "questions a list": ({**GOOD, "questions": [{"type": "noul"}]}, 422),
    "question a string": (q("noul"), 422),
    "criteria a string": (q({"type": "choice", "criteria": "a, b"}), 422),
    "unknown question field": (q({"type": "noul", "weight": 2}), 422),
    "empty question id": ({**GOOD, "questions": {"": {"type": "noul"}}}, 422),
    "model a number": ({**GOOD, "model": 3}, 422),
    "256 options": (q({"type": "choice", "criteria": {f"o{i}": None for i in range(256)}}), 422),
    "65 questions": ({**GOOD, "questions": {f"q{i}": {"type": "noul"} for i in range(65)}}, 422),
    "10,000 levels of nesting": (b'{"state": ' + b"[" * 10_000 + b"]" * 10_000
                                 + b', "questions": {"q": {"type": "noul"}}}', 422),
    "nesting in a question": (q({"type": "noul", "instructions": json.loads("[" * 500 + "]" * 500)}), 422),
    "bad x_session": ({**GOOD, "x_session": 5}, 422),
}


def read_reply(s: socket.socket) -> bytes:
    """One HTTP response from a raw socket: its head and its Content-Length of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = s.recv(4096)
        if not more:
            return data
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        more = s.recv(4096)
        if not more:
            break
        body += more
    return head + b"\r\n\r\n" + body


def _check_shape(reply) -> None:
    assert reply.headers["content-type"] == "application/json"
    body = reply.json
    if reply.status == 422:
        assert isinstance(body["detail"], list) and body["detail"]
        for d in body["detail"]:
            assert d["loc"][:1] == ["body"] and isinstance(d["msg"], str) and isinstance(d["type"], str)
    else:
        assert isinstance(body["detail"]["error_type"], str) and isinstance(body["detail"]["message"], str)


def test_hostile_bodies_get_4xx_in_the_documented_shapes(serve_live, program) -> None:
    server = serve_live(lambda: program, max_body_bytes=LIMIT)
    for name, (body, status) in CASES.items():
        reply = server.post("/v1/systemone", body)
        assert reply.status == status, (name, reply.status, reply.body[:300])
        _check_shape(reply)
    assert server.post("/v1/systemone", GOOD).status == 200
    text = server.get("/metrics").body.decode()
    assert 'status="5' not in text  # no 5xx was answered


def test_limits_encodings_and_bounds(serve_live, program) -> None:
    server = serve_live(lambda: program, max_body_bytes=LIMIT)
    big = json.dumps({**GOOD, "state": "x " * LIMIT}).encode()
    bomb = zstd.compress(b'{"state": "' + b"a" * (LIMIT * 64) + b'"}')
    assert len(bomb) < LIMIT
    cases = [
        ("over the limit", big, {}, 413),
        ("a zstd bomb", bomb, {"Content-Encoding": "zstd"}, 413),
        ("a gzip bomb", gzip.compress(b" " * (LIMIT * 64)), {"Content-Encoding": "gzip"}, 413),
        ("unknown encoding", json.dumps(GOOD).encode(), {"Content-Encoding": "br"}, 415),
        ("corrupt gzip", b"\x1f\x8b" + b"nonsense" * 20, {"Content-Encoding": "gzip"}, 400),
        ("truncated zstd", zstd.compress(json.dumps(GOOD).encode())[:-4], {"Content-Encoding": "zstd"}, 400),
        ("text/plain is read as JSON", json.dumps(GOOD).encode(), {"Content-Type": "text/plain"}, 200),
    ]
    for name, body, headers, status in cases:
        reply = server.post("/v1/systemone", body, headers=headers)
        assert reply.status == status, (name, reply.status, reply.body[:300])
        if status != 200:
            _check_shape(reply)
    # over the artifact's bound for the state (32,768 tokens), within the body limit: 413 from the runtime
    wide = serve_live(lambda: program, max_body_bytes=4 << 20)
    long_state = {**GOOD, "state": " ".join(f"w{i}" for i in range(12_000))}
    reply = wide.post("/v1/systemone", long_state)
    assert reply.status == 413, reply.body[:300]
    message = reply.json["detail"]["message"]
    assert message.startswith("state: ") and "bound" in message
    assert wide.post("/v1/systemone", GOOD).status == 200


def test_a_chunked_body_over_the_limit_is_refused_while_it_arrives(serve_live, program) -> None:
    server = serve_live(lambda: program, max_body_bytes=LIMIT)
    with socket.create_connection((server.host, server.port), timeout=30) as s:
        s.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 8192
        try:
            for _ in range(LIMIT // len(chunk) + 4):
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed mid-body
        head = read_reply(s)
    assert head.startswith(b"HTTP/1.1 413"), head[:200]


def test_a_client_that_stops_sending_gets_408_and_others_are_answered_meanwhile(serve_live, program) -> None:
    server = serve_live(lambda: program, body_timeout_s=0.5)
    start = time.monotonic()
    with socket.create_connection((server.host, server.port), timeout=30) as s:
        s.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"state\": ")
        assert server.post("/v1/systemone", GOOD).status == 200  # the stalled body holds nobody up
        head = read_reply(s)
    assert head.startswith(b"HTTP/1.1 408"), head[:200]
    assert b'"error_type":"timeout_error"' in head
    assert time.monotonic() - start < 20

"""flidec serve over HTTP on the systemone cpu artifact: every route answers what the Program answers (bit for
bit), zstd and gzip bodies, the Decisions shape (order, names, typed values, runs over 64 questions, cached
tokens from saved states), any tree by name (the planner), models, health, metrics, request ids, keys,
concurrent requests batched with answers equal to each one sent alone (E1), and the official SDK parsing
every answer type with zstd on.
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SERVED = "flidec-tiny"  # conftest's served name
TICKET = ("Hi, I was charged twice for my March invoice (order #4471) and the refund I was promised last "
          "week still hasn't arrived. Please fix this today.")
ROWS = [json.loads(line) for line in (EXAMPLES / "systemone.jsonl").read_text(encoding="utf-8").splitlines()]


def alone(program, rows: list, tree: str | None = None) -> list[dict]:
    """Program.run in a thread of its own on one torch thread (as the server's worker runs), the answers as
    JSON carries them."""
    out: list = []

    def run() -> None:
        torch.set_num_threads(1)
        out.extend(json.loads(json.dumps(program.run(rows, tree))))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out


def noul(**extra: object) -> dict:
    return {"model": "jev-latest", "state": TICKET,
            "questions": {"q": {"type": "noul", "instructions": "Refund?"}}, **extra}


def test_systemone_answers_are_the_program_s_own(live, program) -> None:
    answered = 0
    for row in ROWS:
        got = live.post("/v1/systemone", row)
        assert got.headers["content-type"] == "application/json"
        (want,) = alone(program, [row])
        if "error" in want:  # the example's rows that show errors
            assert got.status in (413, 422), got.body
            continue
        assert got.status == 200, got.body
        assert got.json == want  # the same floats, to the last bit
        assert got.json["model"] == SERVED
        answered += 1
    assert answered >= 3


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "gzip, zstd"])
def test_compressed_bodies_answer_as_plain_ones(live, encoding) -> None:
    row = ROWS[0]
    raw = json.dumps(row).encode()
    body = raw
    for coding in (c.strip() for c in encoding.split(",")):
        body = zstd.compress(body) if coding == "zstd" else gzip.compress(body)
    got = live.post("/v1/systemone", body, headers={"Content-Encoding": encoding})
    assert got.status == 200, got.body
    assert got.json == live.post("/v1/systemone", raw).json


def test_the_sdk_parses_every_answer_type_with_zstd_on(live) -> None:
    from typesafe_sdk import Choice, Noul, RetryPolicy, Score, TypeSafeClient

    options = {f"Queue {i:03d}": f"Tickets routed to queue {i}" for i in range(40)}  # a body over 1 KiB
    with TypeSafeClient(api_key="any", base_url=live.url, timeout=60, compression="zstd",
                        retry=RetryPolicy(max_retries=0)) as client:
        r = client.system_one(state=TICKET, model="jev-latest", questions={
            "refund": Noul(instructions="Is the customer asking for money back?"),
            "queue": Choice(instructions="Which queue?", criteria=options),
            "anger": Score(instructions="How angry?", criteria=["calm", "annoyed", "furious"])})
    assert set(r.nouls) == {"refund"} and set(r.choices) == {"queue"} and set(r.scores) == {"anger"}
    assert r.choices["queue"].choice in options and r.scores["anger"].legend[2] == "furious"
    assert r.model == SERVED and isinstance(r.usage.input_tokens, int)
    assert r.request_id.startswith("req_")


def test_decisions_answer_in_question_order_with_names_and_typed_values(live, program) -> None:
    questions = [
        {"type": "predicate", "instructions": "Is the customer asking for money back?", "name": "refund"},
        {"type": "choice", "instructions": "Which team?", "choices": [
            {"value": "billing", "description": "payments"}, {"value": True}, {"value": "tech"}]},
        {"type": "score", "instructions": "How angry?",
         "levels": [{"label": "calm"}, {"label": "angry", "description": "shouting"}]},
    ]
    got = live.post("/v1/decisions", {"model": SERVED, "input": TICKET, "questions": questions})
    assert got.status == 200, got.body
    d = got.json
    assert [a["type"] for a in d["answers"]] == ["predicate", "choice", "score"]
    assert [a["name"] for a in d["answers"]] == ["refund", None, None]
    pred, choice, score = d["answers"]
    (same,) = alone(program, [{"state": TICKET, "questions": {
        "0": {"type": "noul", "instructions": questions[0]["instructions"]},
        "1": {"type": "choice", "instructions": "Which team?",
              "criteria": {"billing": "payments", "true": None, "tech": None}},
        "2": {"type": "score", "instructions": "How angry?", "criteria": ["calm", "angry: shouting"]}}}])
    a = same["answers"]
    assert pred["probability"] == a["0"]["noul"]
    assert [p["value"] for p in choice["probabilities"]] == ["billing", True, "tech"]
    assert [p["probability"] for p in choice["probabilities"]] == list(a["1"]["probabilities"].values())
    assert choice["choice"] == {"billing": "billing", "true": True, "tech": "tech"}[a["1"]["choice"]]
    assert [(p["value"], p["label"]) for p in score["probabilities"]] == [(0, "calm"), (1, "angry")]
    assert score["score"] == a["2"]["score"] and score["confidence"] == a["2"]["confidence"]
    usage = d["usage"]
    assert usage["input_tokens"] == same["usage"]["input_tokens"] == usage["total_tokens"]
    assert usage["input_tokens_details"] == {"cached_tokens": 0, "cache_write_tokens": 0}
    assert d["model"] == SERVED


def test_decisions_take_400_questions_in_runs_the_tree_can_ask(live) -> None:
    questions = [{"type": "predicate", "instructions": f"Is this about topic {i}?"} for i in range(70)]
    got = live.post("/v1/decisions", {"model": "jev-latest", "input": [
        {"role": "system", "content": "Support inbox"}, {"role": "user", "content": TICKET}],
        "questions": questions})
    assert got.status == 200, got.body
    answers = got.json["answers"]
    assert len(answers) == 70
    alone = live.post("/v1/decisions", {"input": [{"role": "system", "content": "Support inbox"},
                                                  {"role": "user", "content": TICKET}],
                                        "questions": [questions[66]]}).json["answers"][0]
    assert answers[66] == alone  # the second run's question, as asked alone
    over = live.post("/v1/decisions", {"input": "x", "questions": questions * 6})
    assert over.status == 422 and over.json["detail"][0]["loc"] == ["body", "questions"]


def test_decisions_report_cached_tokens_from_saved_states(live) -> None:
    history = " ".join(f"Step {i}: the agent read file {i} and found nothing unusual." for i in range(40))
    ask = [{"type": "predicate", "instructions": "Is the task done?"},
           {"type": "predicate", "instructions": "Did anything fail?"}]
    first = live.post("/v1/decisions", {"input": history, "questions": ask, "prompt_cache_key": "s-cache"})
    again = live.post("/v1/decisions", {"input": history + " Step 40: done.", "questions": ask,
                                        "prompt_cache_key": "s-cache"})
    assert first.status == again.status == 200, (first.body, again.body)
    assert first.json["usage"]["input_tokens_details"]["cached_tokens"] == 0
    cached = again.json["usage"]["input_tokens_details"]["cached_tokens"]
    assert cached > 0 and cached % 2 == 0  # the resumed state tokens, in both questions' prompts
    assert cached < again.json["usage"]["input_tokens"]
    fresh = live.post("/v1/decisions", {"input": history + " Step 40: done.", "questions": ask}).json
    assert fresh["answers"] == again.json["answers"]  # resumed == fresh, bit for bit (E3)


def test_any_tree_answers_by_name(serve_live, planner_program) -> None:
    server = serve_live(lambda: planner_program)
    row = {"history": "The user asked to rename a file.",
           "next_tool": {"instructions": "Which tool next?", "criteria": {"shell": None, "editor": None}},
           "action": [{"text": "mv a b", "outcome": [{"text": "renamed"}, {"text": "failed"}]}]}
    got = server.post("/v1/trees/planner", row)
    assert got.status == 200, got.body
    (want,) = alone(planner_program, [row], "planner")
    assert got.json == want
    assert set(got.json) == {"next_tool", "action"} and len(got.json["action"][0]["outcome"]) == 2
    assert server.post("/v1/trees/nope", row).status == 404
    bad = server.post("/v1/trees/planner", {**row, "action": "mv"})
    assert bad.status == 422 and bad.json["detail"][0]["loc"] == ["body", "action"]
    no_wire = server.post("/v1/systemone", noul())
    assert no_wire.status == 404 and "/v1/trees/" in no_wire.json["detail"]["message"]


def test_models_health_metrics_and_request_ids(live) -> None:
    models = live.get("/v1/models").json["models"]
    assert models[0]["name"] == SERVED and len(models[0]["release_date"]) == 10
    assert live.get("/health").json == {"status": "ready"}
    got = live.post("/v1/systemone", noul(), headers={"X-Request-Id": "abc-123"})
    assert got.headers["x-request-id"] == got.headers["x-typesafe-request-id"] == "abc-123"
    assert live.post("/v1/systemone", noul(), headers={"X-Request-Id": "bad id\t"}).headers[
        "x-request-id"].startswith("req_")
    live.post("/v1/systemone", {"state": 1})
    text = live.get("/metrics").body.decode()
    for line in ('flidec_http_requests_total{route="/v1/systemone",status="200"}',
                 'flidec_http_errors_total{error_type="validation_error",route="/v1/systemone",status="422"}',
                 "flidec_queue_depth 0.0", "flidec_batch_size_count", "flidec_tokens_computed_total",
                 "flidec_tokens_reused_total", 'flidec_bucket_streams_total{bucket="r64",tree="systemone"}',
                 "flidec_ready 1.0",
                 'flidec_http_request_duration_seconds_bucket{le="0.5",route="/v1/systemone"}'):
        assert line in text, line


def test_keys_refuse_missing_and_wrong_ones_with_the_authentication_shape(serve_live, program,
                                                                          tmp_path) -> None:
    from flidec.runtime.http.auth import Keys

    (tmp_path / "keys").write_text("# keys\nk-one\n\nk-two\n")
    server = serve_live(lambda: program, keys=Keys.load(files=[tmp_path / "keys"]))
    for headers, status in (({}, 401), ({"Authorization": "Bearer nope"}, 401),
                            ({"Authorization": "k-one"}, 401), ({"Authorization": "Bearer k-two"}, 200),
                            ({"Authorization": "bearer k-one"}, 200)):
        got = server.post("/v1/systemone", noul(), headers=headers)
        assert got.status == status, (headers, got.body)
        if status == 401:
            assert got.json["detail"]["error_type"] == "authentication_error"
            assert got.headers["www-authenticate"].startswith("Bearer")
    assert server.get("/v1/models").status == 401 and server.get("/metrics").status == 401
    assert server.get("/health").status == 200  # probes need no key


def test_concurrent_requests_share_runs_and_answer_as_alone(live) -> None:
    """E1 through the server: 24 requests from 8 clients at once, answered in shared runs, each equal to the
    same request sent alone."""
    rows = [{"state": f"Ticket {i}: " + TICKET[: 40 + 7 * i], "questions": {
        "r": {"type": "noul", "instructions": "Refund?"},
        "t": {"type": "choice", "criteria": {"billing": None, "tech": None, "other": f"case {i}"}}}}
        for i in range(24)]
    alone = [live.post("/v1/systemone", r).json for r in rows]
    before = live.service.queue.stats()
    barrier = threading.Barrier(8)

    def send(i: int) -> dict:
        if i < 8:
            barrier.wait(10)
        return live.post("/v1/systemone", rows[i]).json

    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(send, range(24)))
    assert together == alone
    after = live.service.queue.stats()
    shared = {size: n - before.batch_sizes.get(size, 0) for size, n in after.batch_sizes.items()}
    assert any(size > 1 and n > 0 for size, n in shared.items()), after.batch_sizes

"""The FastAPI app: routes, the error handlers that keep every answer in the System One shapes, and the
middleware that echoes request ids and counts every answer.

Routes: POST /v1/systemone, POST /v1/decisions, POST /v1/trees/{tree} (any tree of the artifact, its
instance JSON), GET /v1/models, GET /health (200 ready, 503 loading), GET /metrics. Consumes a Service and
AppOptions; bodies go through bodies.py (limits, zstd/gzip, strict JSON), keys through auth.py, the wire
shapes through systemone.py and decisions.py, answers through the Service's queue.
"""

from __future__ import annotations

import datetime
import json
import re
import time
import uuid
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import Response

from flidec.runtime.http.auth import Keys
from flidec.runtime.http.bodies import decode, parse_json, read_body
from flidec.runtime.http.decisions import decision_response, decisions_request
from flidec.runtime.http.errors import ApiError, checked
from flidec.runtime.http.metrics import CONTENT_TYPE as METRICS_TYPE
from flidec.runtime.http.metrics import Metrics
from flidec.runtime.http.service import Service
from flidec.runtime.http.systemone import systemone_instance, wire_tree

JSON = "application/json"
INLINE_BYTES = 64 << 10  # bodies parsed on the event loop; larger or compressed ones in a worker thread
ROUTES = ("/v1/systemone", "/v1/decisions", "/v1/models", "/health", "/metrics")
REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")
STATUS_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 405: "method_not_allowed", 408: "timeout_error",
                413: "request_too_large", 415: "unsupported_media_type", 429: "rate_limit_error",
                503: "overloaded_error"}


@dataclass(frozen=True, slots=True)
class AppOptions:
    keys: Keys = Keys()
    max_body_bytes: int = 8 << 20  # on the wire and once decoded
    body_timeout_s: float = 30.0  # to receive a body, from its headers
    description: str = "a flidec artifact"
    release_date: str | None = None  # GET /v1/models' YYYY-MM-DD (None: today, UTC)


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    text = json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return Response(text.encode("utf-8"), status, headers=headers, media_type=JSON)


def _route_of(path: str) -> str:
    """The route template a path is counted under (bounded label values)."""
    if path in ROUTES:
        return path
    if path.startswith("/v1/trees/"):
        return "/v1/trees/{tree}"
    return "other"


class _Observe:
    """ASGI middleware: a request id on every answer (the client's X-Request-Id when it is a plain token,
    else a new one) as x-request-id and x-typesafe-request-id, and every answer counted."""

    def __init__(self, app: Any, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.monotonic()
        given = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-request-id"), "")
        rid = given if REQUEST_ID.fullmatch(given) else f"req_{uuid.uuid4().hex}"
        scope.setdefault("state", {})
        scope["flidec"] = {"request_id": rid, "arrived": start, "error_type": None}
        status = [500]

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                headers = list(message.get("headers", []))
                headers += [(b"x-request-id", rid.encode()), (b"x-typesafe-request-id", rid.encode())]
                message["headers"] = headers
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.in_flight.dec()
            self.metrics.observe(_route_of(scope["path"]), status[0], time.monotonic() - start,
                                 scope["flidec"]["error_type"])


def _error(request: Request, e: ApiError) -> Response:
    request.scope.get("flidec", {})["error_type"] = e.error_type
    return json_response(e.status, e.body, e.headers)


def create_app(service: Service, options: AppOptions = AppOptions()) -> FastAPI:
    """The app over `service` (started by the app's lifespan if not started already, closed at its end:
    uvicorn's graceful shutdown finishes the requests in flight, then the queue answers what it holds)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        if not service.loaded.is_set() and service._thread is None:
            service.start()
        yield
        service.close()

    app = FastAPI(title="flidec serve", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    metrics = Metrics(service.live)
    app.add_middleware(_Observe, metrics=metrics)
    app.state.service = service
    app.state.metrics = metrics

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> Response:
        return _error(request, e)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> Response:
        kind = STATUS_TYPES.get(e.status_code, "invalid_request_error")
        path = request.url.path
        message = {404: f"no route {path}: the routes are {', '.join(ROUTES)}, /v1/trees/{{tree}}",
                   405: f"{request.method} is not allowed on {path}"}.get(e.status_code, str(e.detail))
        return _error(request, ApiError(e.status_code, kind, message, dict(e.headers or {})))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, e: RequestValidationError) -> Response:
        request.scope.get("flidec", {})["error_type"] = "validation_error"
        detail = [{"loc": list(d.get("loc", ["body"])), "msg": str(d.get("msg", "")),
                   "type": str(d.get("type", ""))} for d in e.errors()]
        return json_response(422, {"detail": detail})

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> Response:
        return _error(request, ApiError(500, "internal_error", f"{type(e).__name__}: {e} (a bug in flidec "
                                        "serve: report it with the request)"))

    async def body_of(request: Request) -> Any:
        options.keys.check(request.headers.get("authorization"))
        raw = await read_body(request, options.max_body_bytes, options.body_timeout_s)
        encoding = request.headers.get("content-encoding")

        def parsed() -> Any:
            return parse_json(decode(raw, encoding, options.max_body_bytes))

        if len(raw) < INLINE_BYTES and not encoding:
            return parsed()
        return await run_in_threadpool(parsed)  # a large body is not parsed on the event loop

    def arrived(request: Request) -> float:
        return request.scope.get("flidec", {}).get("arrived", time.monotonic())

    async def answer_one(request: Request, bind: Callable[[Any, Any], tuple[str, Any]]) -> Response:
        """One instance of one tree: `bind(program, body)` names the tree (and checks what is the route's
        own: `model`), the Scheduler prepares (validates) and runs it, and its checked result is the
        answer."""
        body = await body_of(request)
        tree, instance = bind(service.ready_program(), body)
        (result,) = await service.run([instance], tree, arrived(request), request.is_disconnected)
        return json_response(200, checked(result.record))

    @app.post("/v1/systemone")
    async def systemone(request: Request) -> Response:
        def bind(program: Any, body: Any) -> tuple[str, dict]:
            tree = wire_tree(t.tree for t in program.trees.values())
            instance = systemone_instance(tree, body, [program.served_name])  # 404 without a wire tree
            assert tree is not None
            return tree.name, instance

        return await answer_one(request, bind)

    @app.post("/v1/trees/{name}")
    async def tree_route(name: str, request: Request) -> Response:
        def bind(program: Any, body: Any) -> tuple[str, dict]:
            if name not in program.trees:
                raise ApiError(404, "not_found_error", f"the artifact has no tree {name!r}: it has "
                               f"{', '.join(program.trees)}")
            return name, body  # validated once, in the Program's host stage

        return await answer_one(request, bind)

    @app.post("/v1/decisions")
    async def decisions(request: Request) -> Response:
        body = await body_of(request)
        program = service.ready_program()
        tree = wire_tree(t.tree for t in program.trees.values())
        asked = decisions_request(tree, body, [program.served_name])
        assert tree is not None
        ran = await service.run(asked.instances, tree.name, arrived(request), request.is_disconnected)
        results = [checked(r.record) for r in ran]
        reused = [r.reused for r in ran]
        return json_response(200, decision_response(asked, results, reused, program.served_name))

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        options.keys.check(request.headers.get("authorization"))
        program = service.ready_program()
        return json_response(200, {"models": [{
            "name": program.served_name, "description": options.description,
            "release_date": options.release_date or _today(), "x_trees": list(program.trees),
            "x_systemone": wire_tree(t.tree for t in program.trees.values()) is not None}]})

    @app.get("/health")
    async def health() -> Response:
        if service.ready:
            return json_response(200, {"status": "ready"})
        if service.error is not None:
            return json_response(503, {"status": "failed", "x_error": str(service.error)})
        return json_response(503, {"status": "loading"}, {"Retry-After": "1"})

    @app.get("/metrics")
    async def metrics_route(request: Request) -> Response:
        options.keys.check(request.headers.get("authorization"))
        return Response(metrics.render(), 200, media_type=METRICS_TYPE)

    return app


def _today() -> str:
    return datetime.datetime.now(datetime.UTC).date().isoformat()

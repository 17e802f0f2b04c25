"""The service's HTTP API, on the project's own asyncio HTTP/1.1 server (`gateway.server`): routes to the service.

    POST   /v1/tasks                       TaskRequest -> 202 (201 is never used: a task is accepted, not made)
    GET    /v1/tasks                       every task's status, without sessions
    GET    /v1/tasks/{id}                  status and results so far
    GET    /v1/tasks/{id}/results?wait=S   long-poll: the result once done, or as it stands after S seconds
    DELETE /v1/tasks/{id}                  cancel: queued samples dropped, sessions in flight ended, containers removed
    GET    /v1/tasks/{id}/events           server-sent events of its sessions' state changes (Last-Event-ID resumes)
    GET    /v1/results?after=N&wait=S      finished tasks across the service, in the order they finished, after
                                           cursor N (long-poll S seconds for one); ``limit``, ``sessions=0``
    GET    /v1/engines                     the engines the nodes drive: URL, kind, model, weight version, in rotation
    GET    /v1/status                      pools, queue depths, sessions per state, deliveries
    GET    /health                         200 while the service runs (no token needed)
    POST   /v1/admin/pause?mode=drain|abort, /v1/admin/resume
    POST   /v1/admin/weights {"weight_version", "weights_path"?}: with a path, every engine loads it (`weights`)

Every error has one shape, with the HTTP status: ``{"error": {"status", "type", "message", "field"}}``; a body that
does not validate is a 400 naming the first bad field (unknown keys included). With a token configured every route
but /health needs ``Authorization: Bearer <token>`` (401 otherwise).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, unquote

import orjson
from pydantic import BaseModel, ValidationError

from polar_cli.gateway.handler import CallState, Reply
from polar_cli.serve import weights
from polar_cli.serve.models import PauseRequest, TaskRequest, WeightsRequest
from polar_cli.serve.service import Conflict, NotFound, Paused, RolloutService
from polar_cli.serve.tasks import TaskError
from polar_cli.wire.http11 import Request

log = logging.getLogger("polar.serve")

MAX_WAIT = 3600.0
# an SSE comment sent while nothing happens, so proxies and clients see the stream is alive
KEEPALIVE = 15.0


class ApiError(Exception):
    def __init__(self, status: int, kind: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.field = status, kind, message, field


def error_body(status: int, kind: str, message: str, field: str | None = None) -> bytes:
    return orjson.dumps({"error": {"status": status, "type": kind, "message": message, "field": field}})


def _json(status: int, payload: Any) -> Reply:
    return Reply(status, orjson.dumps(payload))


def _validate(model: type[BaseModel], raw: bytes) -> Any:
    try:
        data = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "bad_request", f"the body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ApiError(400, "bad_request", f"the body must be a JSON object, not {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        message = (
            "unknown key" if first["type"] == "extra_forbidden" else str(first["msg"]).removeprefix("Value error, ")
        )
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ApiError(400, "invalid_request", f"{where or 'body'}: {message}{more}", where) from exc


class ServiceApi:
    """The `gateway.server.Handler` of `polar serve`."""

    def __init__(self, service: RolloutService, token: str | None) -> None:
        self.service = service
        self.token = token

    def error_body(self, path: str, status: int, kind: str, message: str) -> bytes:
        del path
        return error_body(status, kind, message)

    async def close(self) -> None:
        return None

    async def handle(self, request: Request, state: CallState) -> Reply:
        try:
            return await self._route(request, state)
        except ApiError as exc:
            return Reply(exc.status, error_body(exc.status, exc.kind, exc.message, exc.field))
        except TaskError as exc:
            return Reply(400, error_body(400, "invalid_request", str(exc), exc.field))
        except NotFound as exc:
            return Reply(404, error_body(404, "not_found", str(exc)))
        except Conflict as exc:
            return Reply(409, error_body(409, "conflict", str(exc)))
        except Paused as exc:
            return Reply(503, error_body(503, "paused", str(exc)))
        except weights.SyncFailed as exc:
            body = orjson.loads(error_body(502, "weights_not_loaded", str(exc)))
            return Reply(502, orjson.dumps(body | {"sync": exc.report}))

    def _authorize(self, request: Request) -> None:
        if self.token is None:
            return
        sent = request.headers.get("authorization", "")
        given = sent[7:].strip() if sent[:7].lower() == "bearer " else ""
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise ApiError(401, "unauthorized", "send Authorization: Bearer <the service's token>")

    async def _route(self, request: Request, state: CallState) -> Reply:
        method, parts = request.method, [unquote(p) for p in request.path.strip("/").split("/")]
        if parts == ["health"]:
            return _json(200, {"status": "ok" if self.service.fatal is None else "stopping"})
        self._authorize(request)
        query = {k: v[-1] for k, v in parse_qs(request.query).items()}
        service = self.service
        match (method, parts):
            case ("POST", ["v1", "tasks"]):
                task_request = _validate(TaskRequest, request.body)
                await service.manifests.preload(task_request)  # a large manifest is read off the event loop
                created, task = service.submit(task_request)
                payload = service.result(task.record.task_id, sessions=False)
                payload["created"] = created
                return _json(202, payload)
            case ("GET", ["v1", "tasks"]):
                return _json(200, {"tasks": [service.result(t, sessions=False) for t in service.tasks]})
            case ("GET", ["v1", "tasks", task_id]):
                return _json(200, service.result(task_id))
            case ("GET", ["v1", "tasks", task_id, "results"]):
                wait = _seconds(query.get("wait", "0"), "wait")
                service.get(task_id)
                state.waiting_upstream = True  # a client that hangs up ends the wait
                try:
                    return _json(200, await service.wait(task_id, wait))
                finally:
                    state.waiting_upstream = False
            case ("DELETE", ["v1", "tasks", task_id]):
                service.cancel(task_id)
                return _json(202, service.result(task_id, sessions=False))
            case ("GET", ["v1", "tasks", task_id, "events"]):
                service.get(task_id)
                after = request.headers.get("last-event-id") or query.get("after") or "0"
                if not after.isdigit():
                    raise ApiError(400, "invalid_request", "Last-Event-ID: expected an event number", "after")
                state.waiting_upstream = True
                return Reply(200, b"", "text/event-stream", live=self._sse(task_id, int(after)))
            case ("GET", ["v1", "results"]):
                return _json(200, await self._finished(query, state))
            case ("GET", ["v1", "engines"]):
                engines = getattr(service.node, "engines", None)
                listed = engines() if engines is not None else []
                return _json(200, {"engines": listed, "weight_version": service.journal.weight_version})
            case ("GET", ["v1", "status"]):
                return _json(200, service.status())
            case ("POST", ["v1", "admin", "pause"]):
                mode = query.get("mode") or _validate(PauseRequest, request.body).mode
                if mode not in ("drain", "abort"):
                    raise ApiError(400, "invalid_request", f"mode: {mode!r} is not drain or abort", "mode")
                return _json(200, await service.pause(mode))
            case ("POST", ["v1", "admin", "resume"]):
                return _json(200, await service.resume())
            case ("POST", ["v1", "admin", "weights"]):
                return _json(200, await weights.sync(service, _validate(WeightsRequest, request.body)))
            case (
                _,
                ["v1", "tasks"] | ["v1", "tasks", _] | ["v1", "tasks", _, _] | ["v1", "status" | "results" | "engines"],
            ):
                raise ApiError(405, "method_not_allowed", f"{method} is not allowed on {request.path}")
            case (_, ["v1", "admin", _]):
                raise ApiError(405, "method_not_allowed", f"{method} is not allowed on {request.path}")
        raise ApiError(404, "not_found", f"no route {method} {request.path}")

    async def _finished(self, query: dict[str, str], state: CallState) -> dict[str, Any]:
        after, limit = _count(query.get("after", "0"), "after"), _count(query.get("limit", "16"), "limit")
        if limit < 1:
            raise ApiError(400, "invalid_request", "limit: at least 1", "limit")
        sessions = query.get("sessions", "1") not in ("0", "false")
        state.waiting_upstream = True
        try:
            ids, cursor = await self.service.finished.after(after, _seconds(query.get("wait", "0"), "wait"), limit)
        finally:
            state.waiting_upstream = False
        return {"tasks": [self.service.result(t, sessions=sessions) for t in ids], "cursor": cursor}

    async def _sse(self, task_id: str, after: int) -> AsyncIterator[bytes]:
        async for event in self.service.events(task_id, after, heartbeat=KEEPALIVE):
            if event is None:
                yield b": keep-alive\n\n"
            else:
                yield b"id: %d\nevent: session\ndata: %s\n\n" % (event["id"], orjson.dumps(event))
        yield b"event: end\ndata: {}\n\n"


def _count(text: str, name: str) -> int:
    if not text.isdigit():
        raise ApiError(400, "invalid_request", f"{name}: expected a whole number, got {text!r}", name)
    return int(text)


def _seconds(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ApiError(400, "invalid_request", f"{name}: expected seconds, got {text!r}", name) from None
    if not 0 <= value <= MAX_WAIT:
        raise ApiError(400, "invalid_request", f"{name}: between 0 and {MAX_WAIT:g} seconds", name)
    return value

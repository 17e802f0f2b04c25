"""One model call through the gateway: detect, authenticate, decode, call upstream, capture, answer.

This is the only place that knows the order of those steps; each step is a pure function elsewhere (`translate/`)
or a small I/O object handed in (`UpstreamClient`, `CaptureWriter`). The handler never branches on the provider API:
the codec the registry picked does every API-specific thing.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from array import array
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import orjson

from polar_cli import metrics
from polar_cli.capture import CaptureRecord, CaptureWriter
from polar_cli.capture.record import CaptureStatus, PromptMode
from polar_cli.errors import ErrorKind, RequestError, UpstreamError
from polar_cli.gateway import budget
from polar_cli.gateway.continuation import SampledTurn, TokenIn, answer_message, call_context, token_in_prompt
from polar_cli.gateway.pause import Flight, ModelCallGate
from polar_cli.gateway.sessions import (
    Session,
    SessionRegistry,
    api_key,
    apply_sampling,
    redact_headers,
    redact_query,
)
from polar_cli.gateway.upstream_client import UPSTREAM_PATH, Upstream
from polar_cli.templates import TemplateTraits, make_template_safe, unfit
from polar_cli.translate.codec import Codec, Route
from polar_cli.translate.images import check_images
from polar_cli.translate.ir import ChatRequest, Completion
from polar_cli.translate.json_checks import load_object
from polar_cli.translate.registry import CODECS, error_codec_for_path, route_for_path, route_for_unknown_path
from polar_cli.translate.token_in import prompt_mismatch, token_in_request
from polar_cli.translate.upstream import (
    UpstreamAnswer,
    UpstreamOptions,
    chat_body,
    parse_answer,
    strip_tokens,
    tool_kinds,
    upstream_answer,
)
from polar_cli.wire.http11 import Request, Response

log = logging.getLogger("polar.gateway")


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    # A streamed answer in its API's framing (SSE frames, or Google's JSON array), sent with chunked encoding.
    stream: list[bytes] | None = None
    # A live stream (server-sent events of the rollout service): chunks written as they come, until it ends
    live: AsyncIterator[bytes] | None = None


@dataclass(slots=True)
class CallState:
    """Shared by a connection and the call it serves: while the call waits on the model, a hang-up cancels it."""

    waiting_upstream: bool = False


@dataclass(slots=True)
class _Call:
    """What one call has learned so far, for its capture record."""

    session: Session
    seq: int
    started: float
    route: Route
    request: Request
    body: dict[str, Any]
    upstream_body: dict[str, Any] | None = None
    upstream_bytes: bytes | None = None
    upstream_answer: dict[str, Any] | None = None
    # token-in mode: how the prompt was made, and why not from ids when it was rendered
    prompt_mode: PromptMode | None = None
    prompt_note: str | None = None
    # the template-safety rules that reshaped the history (templates/normalize.py)
    template_rules: tuple[str, ...] = ()
    # the weights' version when the call was (last) sent upstream
    weight_version: str | None = None
    # the upstream call in flight (pause.py), for the abort when the harness hangs up
    flight: Flight | None = None


class Gateway:
    def __init__(
        self,
        *,
        upstream: Upstream,
        options: UpstreamOptions,
        sessions: SessionRegistry,
        capture: CaptureWriter | None,
        token_in: TokenIn | None = None,
        traits: TemplateTraits | None = None,
    ) -> None:
        self.upstream = upstream
        self.options = options
        self.token_in = token_in
        # what the server's chat template refuses or drops (templates/traits.py); None: the history goes as it is
        self.traits = traits
        self.sessions = sessions
        self.capture = capture
        # call ids: a random per-process prefix and a counter (uuid4 per call costs an urandom read on the hot path)
        self._id_prefix = secrets.token_hex(6)
        self._ids = itertools.count()
        # aborts sent for calls whose harness hung up or that the gate aborted; awaited on close so none is dropped
        self._aborts: set[asyncio.Task[None]] = set()
        # holds model calls back while the server's weights are replaced (pause.py)
        self.gate = ModelCallGate(abort=self._send_abort)

    def error_body(self, path: str, status: int, kind: str, message: str) -> bytes:
        """An error in the API shape the caller of ``path`` reads (the server's own faults and refusals)."""
        return orjson.dumps(error_codec_for_path(path).encode_error(status, kind, message))  # type: ignore[arg-type]

    async def handle(self, request: Request, state: CallState | None = None) -> Reply:
        if request.path == "/health":
            return Reply(200, b'{"status":"ok"}')
        codec = error_codec_for_path(request.path)
        try:
            route = route_for_path(request.path, request.query)
            body: dict[str, Any] | None = None
            if route is None and request.method == "POST":
                body = load_object(request.body, "request body")
                route = route_for_unknown_path(request.path, request.headers, body)
            if route is None:
                raise RequestError(f"no model API at {request.path}", status=404, kind="not_found")
            codec = CODECS[route.api]
            if request.method != "POST":
                raise RequestError(
                    f"{request.method} is not allowed here: use POST", status=405, kind="method_not_allowed"
                )
            session = self.sessions.lookup(api_key(request.headers, request.query))
        except RequestError as exc:
            return _error(codec, exc.status, exc.kind, exc.message)
        call = _Call(session, session.next_seq(), time.time(), route, request, {})
        try:
            call.body = body if body is not None else load_object(request.body, "request body")
            chat = codec.decode_request(call.body, route)
            check_images(chat, remote=self.options.remote_images)
        except RequestError as exc:
            self._record(call, "client_error", error=exc.message, error_kind=exc.kind)
            return _error(codec, exc.status, exc.kind, exc.message)
        return await self._call_upstream(codec, call, chat, state or CallState())

    async def _call_upstream(self, codec: Codec, call: _Call, chat: ChatRequest, state: CallState) -> Reply:
        completion_id = f"{self._id_prefix}{next(self._ids):012x}"
        body = call.upstream_body = chat_body(chat, self.options, rid=completion_id)
        if call.session.sampling:
            apply_sampling(body, call.session.sampling, self.options.max_tokens_cap)
        if (refused := budget.refusal(call.session)) is not None:
            self._record(call, "client_error", error=refused, error_kind=budget.BUDGET_KIND)
            return _error(codec, 400, "context_length", refused)
        budget.limit(body, call.session)
        if self.options.reasoning == "reinject":
            body["messages"], _ = call.session.reasoning.reinject(body["messages"])
        if self.traits is not None:
            body["messages"], call.template_rules = make_template_safe(body["messages"], self.traits)
            if (misfit := unfit(body["messages"], self.traits)) is not None:
                # no rule mends it: the harness gets a 400 naming the trait, not the server's refusal of the render
                call.upstream_bytes = orjson.dumps(body)
                self._record(call, "client_error", error=misfit.message, error_kind=f"template:{misfit.trait}")
                return _error(codec, 400, "invalid_request", misfit.message)
        call.upstream_bytes = orjson.dumps(body)
        sent_body, sent = body, call.upstream_bytes
        ids = None
        if self.token_in is not None and call.session.token_in:
            ids = await self._token_in_prompt(call, body)
        elif self.token_in is not None:
            call.prompt_mode, call.prompt_note = "rendered", "token-in is off for this session"
        if ids is not None:
            # the capture keeps the body without the ids (they are the record's prompt ids): no quadratic growth
            sent_body = token_in_request(self.options.dialect, body, ids)[1]
            sent = orjson.dumps(sent_body)
        try:
            state.waiting_upstream = True
            try:
                sent_at = time.monotonic()
                response = await self._send(call, sent_body, sent)
                metrics.upstream_seconds(call.route.api, time.monotonic() - sent_at)
            finally:
                state.waiting_upstream = False
            call.upstream_answer = upstream_answer(response.status, response.body)
            try:
                answer = parse_answer(call.upstream_answer, tool_kinds(chat.tools))
            except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
                # a shape parse_answer's checks did not foresee is still the server's fault: recorded, a 502
                raise UpstreamError(f"malformed upstream answer: {type(exc).__name__}: {exc}") from exc
            if ids is not None and (mismatch := prompt_mismatch(ids, answer.tokens)) is not None:
                # the server rendered the messages itself: a faithful capture of that prompt, recorded as such
                call.prompt_mode, call.prompt_note = "rendered", mismatch
        except UpstreamError as exc:
            log.warning("session %s call %d: %s", call.session.id, call.seq, exc.message)
            self._record(call, "upstream_error", error=exc.message, error_kind=exc.kind)
            if chat.stream and codec.encode_stream_error is not None and exc.kind in codec.stream_error_kinds:
                frames = codec.encode_stream_error(chat, completion_id, int(call.started), exc.kind, exc.message)
                return Reply(200, b"", "text/event-stream", stream=frames)
            return _error(codec, exc.status, exc.kind, exc.message)
        except asyncio.CancelledError:
            # the harness hung up: free the server's slot, keep a record of the attempt
            self._record(call, "client_error", error="client disconnected before the answer")
            flight = call.flight
            if flight is not None and not flight.task.done():
                flight.task.cancel()
                if flight.rid is not None:
                    self._send_abort(flight.rid)
            raise
        completion = _completion(completion_id, chat, answer, codec.tool_call_id_prefix, call.started)
        self._remember(call.session, body, completion, answer)
        budget.spend(call.session, len(answer.tokens.response_ids))
        self._record(call, "ok", answer=answer)
        if not chat.stream:
            return Reply(200, orjson.dumps(codec.encode_response(chat, completion)))
        stream = codec.stream(chat, completion, call.route)
        return Reply(200, b"", stream.content_type, stream=stream.chunks)

    async def _send(self, call: _Call, body: dict[str, Any], data: bytes) -> Response:
        """The upstream answer to ``data`` (``body``), sent through the gate: it waits while the gate is closed, and a
        call the gate aborts is sent again once it opens, under a fresh rid. A hang-up (this task cancelled) leaves
        ``call.flight`` set to the call still in flight, whose task the caller cancels."""
        first_rid = body.get("rid")
        replays = 0
        while True:
            await self.gate.enter(replay=replays > 0)
            call.weight_version = self.gate.weight_version
            rid = body.get("rid")
            post = self.upstream.post_json(UPSTREAM_PATH, data, session=call.session.id)
            flight = call.flight = self.gate.send(post, rid if isinstance(rid, str) else None)
            await asyncio.wait((flight.task,))  # a CancelledError here is our own: the harness hung up
            call.flight = None
            task = flight.task
            if not (flight.aborted and (task.cancelled() or task.exception() is not None)):
                response: Response = task.result()
                return response
            # aborted by the gate for a weight update: the same call again once the gate opens, the harness none the
            # wiser (a fresh rid: the server may still hold the aborted one)
            replays += 1
            log.info("session %s call %d: aborted by the gate, replayed when it opens", call.session.id, call.seq)
            if isinstance(first_rid, str) and call.upstream_body is not None:
                fresh = f"{first_rid}-r{replays}"
                body = {**body, "rid": fresh}
                data = orjson.dumps(body)
                call.upstream_body = {**call.upstream_body, "rid": fresh}
                call.upstream_bytes = orjson.dumps(call.upstream_body)

    def _send_abort(self, rid: str) -> asyncio.Task[None] | None:
        """Ask the server to drop the request ``rid`` (when its dialect aborts); the task doing it, kept until close."""
        if not self.options.dialect.aborts:
            return None
        task = asyncio.get_running_loop().create_task(self._abort(rid))
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)
        return task

    async def _token_in_prompt(self, call: _Call, body: dict[str, Any]) -> list[int] | None:
        """The exact prompt ids of a call that continues an earlier one (module `continuation`); None: rendered."""
        assert self.token_in is not None
        plan = await asyncio.get_running_loop().run_in_executor(
            None, token_in_prompt, tuple(call.session.turns), body, self.token_in, self.options.dialect
        )
        if isinstance(plan, str):
            call.prompt_mode, call.prompt_note = "rendered", plan
            return None
        call.prompt_mode = "token_in"
        return plan

    def _remember(self, session: Session, body: dict[str, Any], completion: Completion, answer: UpstreamAnswer) -> None:
        """Keep what later calls of the session need: the reasoning of this answer, its tokens (token-in)."""
        if self.options.reasoning != "reinject" and self.token_in is None:
            return
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in completion.tool_calls
        ]
        message = answer_message(completion.text, completion.reasoning, calls)
        if self.options.reasoning == "reinject":
            session.reasoning.remember(message)
        if self.token_in is not None:
            tokens = answer.tokens
            # the prompt as 4-byte ids: a session keeps several long ones (a list of ints costs ~9x that)
            prompt = array("i", tokens.prompt_ids)
            turn = SampledTurn(tuple(body["messages"]), call_context(body), message, prompt, tokens.response_ids)
            session.turns.append(turn)

    async def close(self) -> None:
        """Finish the aborts still under way (bounded), then close the upstream connections."""
        if self._aborts:
            await asyncio.wait(self._aborts, timeout=5)
        await self.upstream.close()

    async def _abort(self, rid: str) -> None:
        try:
            await self.upstream.post_json("/abort_request", orjson.dumps({"rid": rid}))
        except UpstreamError as exc:
            log.info("abort of %s failed: %s", rid, exc.message)

    def _record(
        self,
        call: _Call,
        status: CaptureStatus,
        *,
        answer: UpstreamAnswer | None = None,
        error: str = "",
        error_kind: str | None = None,
    ) -> None:
        metrics.gateway_call(call.route.api, status, time.time() - call.started, answer, call.weight_version)
        if self.capture is None:
            return
        query = redact_query(call.request.query)
        tokens = answer.tokens if answer is not None else None
        record = CaptureRecord(
            session_id=call.session.id,
            seq=call.seq,
            api=call.route.api,
            path=call.request.path + (f"?{query}" if query else ""),
            started=call.started,
            ended=time.time(),
            status=status,
            request=call.body,
            request_bytes=call.request.body if call.body else None,
            request_headers=redact_headers(call.request.headers),
            normalized=call.upstream_body,
            normalized_bytes=call.upstream_bytes,
            response=strip_tokens(call.upstream_answer) if call.upstream_answer is not None else None,
            prompt_ids=tokens.prompt_ids if tokens else [],
            response_ids=tokens.response_ids if tokens else [],
            response_logprobs=tokens.response_logprobs if tokens else [],
            finish_reason=tokens.finish_reason if tokens else None,
            error=error or None,
            error_kind=error_kind,
            prompt_mode=call.prompt_mode,
            prompt_note=call.prompt_note,
            template_rules=call.template_rules,
            weight_version=call.weight_version,
        )
        try:
            self.capture.write(record)
        except Exception:  # the harness still gets its answer; the loss is logged where an operator sees it
            log.exception("capture of session %s call %d failed", call.session.id, call.seq)


def _completion(
    completion_id: str, chat: ChatRequest, answer: UpstreamAnswer, prefix: str, started: float
) -> Completion:
    # Servers mint tool-call ids per answer (some as "call_0", "functions.bash:0"), which repeat across turns; the
    # gateway's ids are unique for the session's whole life, which harnesses that key results by id rely on.
    calls = tuple(replace(c, id=f"{prefix}{completion_id}_{i}") for i, c in enumerate(answer.tool_calls))
    return Completion(
        id=completion_id,
        model=chat.model,
        created=int(started),
        text=answer.text,
        reasoning=answer.reasoning,
        tool_calls=calls,
        finish_reason=answer.finish_reason,
        usage=answer.usage,
    )


def _error(codec: Codec, status: int, kind: ErrorKind, message: str) -> Reply:
    return Reply(status, orjson.dumps(codec.encode_error(status, kind, message)))

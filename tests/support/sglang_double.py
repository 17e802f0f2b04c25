"""A test upstream that speaks SGLang 0.5.23's exact /v1/chat/completions wire format.

Every request is validated with SGLang's own ``ChatCompletionRequest``; every answer is built with its
``ChatCompletionResponse`` and serialised the way SGLang serialises it (``model_dump_json(by_alias=True)``).
A request SGLang would refuse gets SGLang's 400 body *and* is recorded in ``rejections``; with
``strict=True`` (the default) leaving the context manager with rejections fails the test.

    with SGLangDouble(script=[Reply("Hi"), Reply(tool_calls=(ToolCallReply("ls", {}),))]) as up:
        ... point the gateway at up.url ...
        assert up.requests[0].prompt_ids == up.tokenize(messages)

Replies are consumed in order; once the script is exhausted every call gets ``default``. Token ids come
from tests.support.chatml_ids (prefix-stable, see its docstring). Dialects:

- ``sglang`` (0.5.23): per choice ``prompt_token_ids`` (``return_token_ids`` or
  ``return_prompt_token_ids``), ``response_token_ids`` (``return_token_ids``), ``meta_info``
  (``return_meta_info``); ``message.reasoning_content``; ``matched_stop``.
- ``sglang-legacy``: older releases that know only ``return_prompt_token_ids`` + ``return_meta_info``:
  no ``response_token_ids``; output ids only in ``meta_info.output_token_logprobs`` ``[[logprob, id, text]]``.
- ``vllm``: TOP-LEVEL ``prompt_token_ids``, per-choice ``token_ids`` and ``stop_reason``,
  ``message.reasoning``, errors as ``{"error": {...}}`` (vLLM 0.32 shapes).

A real chat template instead of ChatML ids (tests/support/sglang_chat.py, tests/support/templates.py ``NAMES``):

    with SGLangDouble(script, template="qwen3.5", chat_template_kwargs_default={"enable_thinking": False}) as up:

renders every request exactly as SGLang 0.5.23 does (its pre-template step, transformers' apply_chat_template, the
template's vocabulary); a reply's sampled ids are the template's rendering of that assistant turn as the last message
(ChatTokenizer.sampled_text), and the answer's ``content`` / ``reasoning_content`` / ``tool_calls`` are what SGLang's
ReasoningParser and FunctionCallParser make of them (``tool_call_parser`` / ``reasoning_parser`` default to what
SGLang's auto-detection picks for the template: sglang_chat.DEFAULT_PARSERS). A request the template refuses gets
SGLang's own error (400 ``BadRequest`` with the template's message) and is recorded in ``rejections`` (the gateway's
start-up probes, rid ``polar-probe...``, are there to be refused: strict mode lets theirs pass). ``eot_id`` is
the template's end-of-turn token then. ``input_ids`` in a request (SGLang's token-in field) is the prompt as sent, in
both modes; the messages still give the reply its context.

Without ``template=``, the double takes ``$POLAR_TEST_TEMPLATE`` (e.g. ``POLAR_TEST_TEMPLATE=qwen3.5 pytest ...``), so
every tier that talks to "SGLang" runs on any template; unset or empty, ChatML ids. ``template=None`` pins ChatML.

A slow server (a long generation): ``delay=2.5`` holds every chat answer until 2.5 s after its request arrived (the
attribute can be changed while the double runs). Each connection has its own thread, so delayed calls overlap;
``in_flight`` and ``peak_in_flight`` count the chat requests being answered at once (the load tests' proof that
nothing upstream of the double serialised them).
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

from pydantic import ValidationError

from tests.support import chatml_ids
from tests.support.double_wire import (
    ContextLengthError,
    ErrorReply,
    Reply,
    ToolCallReply,
    Turn,
    context_length_message,
    error_body,
    sglang_body,
    validation_message,
    vllm_body,
)
from tests.support.sglang_chat import UNSET, Prompt, Refusal, SGLangTemplate

try:
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
except ImportError as exc:  # pragma: no cover - depends on the machine
    raise ImportError("sglang's protocol models are not installed in this venv: run scripts/setup-tests") from exc

__all__ = [
    "ContextLengthError",
    "ErrorReply",
    "ReceivedRequest",
    "Refusal",
    "Rejection",
    "Reply",
    "SGLangDouble",
    "ScriptItem",
    "ToolCallReply",
]

Dialect = Literal["sglang", "sglang-legacy", "vllm"]
ScriptItem = Reply | ErrorReply | ContextLengthError
CHAT_PATH = "/v1/chat/completions"
TEMPLATE_ENV = "POLAR_TEST_TEMPLATE"
FROM_ENV: Any = object()
DEFAULT_REPLY = Reply("ok")
_MEDIA_TYPE_ERROR: dict[str, Any] = {
    "loc": ("header", "content-type"),
    "msg": "Unsupported Media Type: Only 'application/json' is allowed",
    "type": "value_error",
}
_STREAM_FLAGS = (
    ("return_prompt_token_ids", "return_prompt_token_ids is not supported with streaming. "
     "Please set stream=false when using return_prompt_token_ids=true."),
    ("return_token_ids", "return_token_ids is not supported with streaming on /v1/chat/completions. "
     "Please set stream=false when using return_token_ids=true."),
    ("return_meta_info", "return_meta_info is not supported with streaming. "
     "Please set stream=false when using return_meta_info=true."),
)  # fmt: skip


@dataclass(frozen=True)
class ReceivedRequest:
    """One HTTP request as the double saw it."""

    path: str
    body: Any
    headers: dict[str, str]
    # The ids the double rendered for a valid chat request; None for other paths and refused requests.
    prompt_ids: tuple[int, ...] | None = None
    # Top-level fields SGLang's schema does not know (SGLang ignores them silently).
    unknown_fields: tuple[str, ...] = ()
    # With a real template: the rendered prompt text (None for token-in requests).
    prompt_text: str | None = None


@dataclass(frozen=True)
class Rejection:
    """A request the real server would have refused, with the reason."""

    path: str
    body: Any
    message: str
    # A template's refusal of one of the gateway's start-up probes (rid ``polar-probe...``): the probe asks the server
    # what its template refuses, so the refusal is its answer, not a fault; strict mode lets it pass.
    probe: bool = False


@dataclass
class _Shared:
    script: list[ScriptItem]
    requests: list[ReceivedRequest] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    calls: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class SGLangDouble:
    """Scripted SGLang (or vLLM) chat server on 127.0.0.1, ephemeral port, background thread."""

    def __init__(
        self,
        script: Sequence[ScriptItem] = (),
        *,
        default: ScriptItem = DEFAULT_REPLY,
        dialect: Dialect = "sglang",
        eot_id: int = chatml_ids.DEFAULT_EOT_ID,
        served_model_name: str = "polar-test-model",
        context_len: int = 32768,
        strict: bool = True,
        template: str | None = FROM_ENV,
        chat_template_kwargs_default: dict[str, Any] | None = None,
        tool_call_parser: str | None = UNSET,
        reasoning_parser: str | None = UNSET,
        delay: float = 0.0,
    ) -> None:
        self.default = default
        # seconds from a chat request's arrival to its answer (a slow generation); 0: answer at once
        self.delay = delay
        self.dialect: Dialect = dialect
        if template is FROM_ENV:
            template = os.environ.get(TEMPLATE_ENV) or None
        self.model = (
            SGLangTemplate(
                template,
                tool_call_parser=tool_call_parser,
                reasoning_parser=reasoning_parser,
                chat_template_kwargs_default=chat_template_kwargs_default,
            )
            if template
            else None
        )
        self.eot_id = self.model.eot_id if self.model is not None else eot_id
        self.served_model_name = served_model_name
        self.context_len = context_len
        self.strict = strict
        self._shared = _Shared(script=list(script))
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- test-facing API -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the double is not running: use it as a context manager")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[ReceivedRequest]:
        with self._shared.lock:
            return list(self._shared.requests)

    @property
    def chat_requests(self) -> list[ReceivedRequest]:
        return [r for r in self.requests if r.path == CHAT_PATH]

    @property
    def rejections(self) -> list[Rejection]:
        with self._shared.lock:
            return list(self._shared.rejections)

    @property
    def in_flight(self) -> int:
        """Chat requests received and not yet answered."""
        with self._shared.lock:
            return self._shared.in_flight

    @property
    def peak_in_flight(self) -> int:
        """The most chat requests the double was answering at once."""
        with self._shared.lock:
            return self._shared.peak_in_flight

    def add(self, *items: ScriptItem) -> None:
        with self._shared.lock:
            self._shared.script.extend(items)

    def tokenize(self, messages: Sequence[Any], tools: Sequence[Any] | None = None, **fields: Any) -> list[int]:
        """The prompt ids the double computes for these messages (generation prompt included).

        With a template, ``fields`` are more request fields (``chat_template_kwargs``, ``tool_choice``); a request the
        template refuses raises `Refusal`.
        """
        if self.model is None:
            return chatml_ids.prompt_ids(messages, tools, self.eot_id)
        return list(self.render(messages, tools, **fields).ids)

    def render(self, messages: Sequence[Any], tools: Sequence[Any] | None = None, **fields: Any) -> Prompt:
        """SGLang's prompt for a request with these fields, on the double's template."""
        if self.model is None:
            raise RuntimeError("the double has no template: construct it with template=...")
        body: dict[str, Any] = {"model": self.served_model_name, "messages": list(messages), **fields}
        if tools:
            body["tools"] = list(tools)
        return self.model.prompt(ChatCompletionRequest.model_validate(copy.deepcopy(body)))

    def assert_no_rejections(self) -> None:
        rejections = [r for r in self.rejections if not r.probe]
        assert not rejections, "the upstream refused requests:\n" + "\n".join(r.message for r in rejections)

    # -- request handling (socket-free, so it is testable directly) ------------------------------

    def handle_post(self, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """Answer one POST: (status, JSON body)."""
        try:
            body = json.loads(raw) if raw else None
        except ValueError as exc:
            return self._reject(path, raw.decode("utf-8", "replace"), headers, f"body is not JSON: {exc}")
        if path == CHAT_PATH:
            return self._chat(body, headers)
        self._record(ReceivedRequest(path, body, headers))
        if path == "/abort_request":
            return 200, b"{}"
        if path in ("/v1/tokenize", "/tokenize") and isinstance(body, dict):
            try:
                ids = self.tokenize(body.get("messages") or [], body.get("tools"))
            except Refusal as exc:
                return exc.status, self._error(exc.status, exc.message, exc.err_type)
            return 200, json.dumps({"tokens": ids, "count": len(ids), "max_model_len": self.context_len}).encode()
        return 404, self._error(404, f"no route {path}", "NotFound")

    def handle_get(self, path: str) -> tuple[int, bytes]:
        if path in ("/health", "/health_generate"):
            return 200, b""
        if path == "/v1/models":
            card = {"id": self.served_model_name, "object": "model", "owned_by": "sglang", "root": "double"}
            return 200, json.dumps({"object": "list", "data": [card]}).encode()
        if path in ("/model_info", "/get_model_info"):
            info = {"model_path": self.served_model_name, "is_generation": True, "tokenizer_path": "double"}
            return 200, json.dumps(info).encode()
        return 404, self._error(404, f"no route {path}", "NotFound")

    def _chat(self, body: Any, headers: dict[str, str]) -> tuple[int, bytes]:
        media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            return self._reject_invalid(body, headers, [dict(_MEDIA_TYPE_ERROR)])
        try:
            # SGLang's "before" validators fill defaults into the dict they are given (tool_choice): keep ours intact
            request = ChatCompletionRequest.model_validate(copy.deepcopy(body))
        except ValidationError as exc:
            # FastAPI prefixes body errors with "body"; SGLang's message quotes them that way.
            errors = [dict(e) | {"loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
            return self._reject_invalid(body, headers, errors)
        if request.stream:
            for flag, message in _STREAM_FLAGS:
                if getattr(request, flag):
                    return self._reject(CHAT_PATH, body, headers, message, err_type="BadRequest")
            return self._reject(CHAT_PATH, body, headers, "the double answers stream=false only")
        if request.n != 1:
            return self._reject(CHAT_PATH, body, headers, f"the double answers n=1 only, got n={request.n}")

        prompt: Prompt | None = None
        if self.model is not None:
            try:
                prompt = self.model.prompt(request)
            except Refusal as exc:
                probe = exc.status == 400 and str(body.get("rid") or "").startswith("polar-probe")
                return self._reject(
                    CHAT_PATH, body, headers, exc.message, err_type=exc.err_type, status=exc.status, probe=probe
                )
            ids = prompt.ids
        elif request.input_ids is not None:
            ids = tuple(request.input_ids)
        else:
            ids = tuple(chatml_ids.prompt_ids(body["messages"], body.get("tools"), self.eot_id))
        unknown = tuple(sorted(set(body) - set(ChatCompletionRequest.model_fields)))
        text = prompt.text if prompt is not None else None
        with self._shared.lock:
            self._shared.calls += 1
            call_no = self._shared.calls
            item = self._shared.script.pop(0) if self._shared.script else self.default
            self._shared.requests.append(ReceivedRequest(CHAT_PATH, body, headers, ids, unknown, text))
        if isinstance(item, ErrorReply):
            return item.status, self._error(item.status, item.message, item.err_type, item.param)
        if isinstance(item, ContextLengthError):
            message, param = context_length_message(self.dialect, len(ids), item.context_len)
            return 400, self._error(400, message, "BadRequestError", param)
        if prompt is None:
            turn = Turn.build(item, ids, self.eot_id, call_no)
        else:
            try:
                turn = self._parsed_turn(item, prompt, call_no)
            except Refusal as exc:
                return self._fail(body, exc.status, exc.message, exc.err_type)
        if self.dialect == "vllm":
            return 200, json.dumps(vllm_body(request, turn, self.served_model_name)).encode()
        return 200, sglang_body(request, turn, legacy=self.dialect == "sglang-legacy")

    def _parsed_turn(self, item: Reply, prompt: Prompt, call_no: int) -> Turn:
        assert self.model is not None
        calls = [(c.name, c.arguments) for c in item.tool_calls]
        try:
            answer = self.model.answer(prompt, item.content, item.reasoning, calls, stopped=item.finish == "stop")
        except Refusal:
            raise
        except Exception as exc:  # the template cannot express the scripted turn: a fault of the test's script
            message = f"{self.model.case.name} cannot render the scripted reply {item}: {exc}"
            raise Refusal(500, message, "Script") from exc
        return Turn.parsed(item, prompt.ids, answer, call_no)

    def _fail(self, body: Any, status: int, message: str, err_type: str) -> tuple[int, bytes]:
        # the request was received (and recorded) but cannot be answered
        with self._shared.lock:
            self._shared.rejections.append(Rejection(CHAT_PATH, body, message))
        return status, self._error(status, message, err_type)

    def _reject(
        self,
        path: str,
        body: Any,
        headers: dict[str, str],
        message: str,
        *,
        err_type: str = "BadRequestError",
        param: str | None = None,
        status: int = 400,
        probe: bool = False,
    ) -> tuple[int, bytes]:
        with self._shared.lock:
            self._shared.requests.append(ReceivedRequest(path, body, headers))
            self._shared.rejections.append(Rejection(path, body, message, probe))
        return status, self._error(status, message, err_type, param)

    def _reject_invalid(self, body: Any, headers: dict[str, str], errors: list[dict[str, Any]]) -> tuple[int, bytes]:
        message, param = validation_message(self.dialect, errors)
        # FastAPI validation failures carry the HTTP phrase as their type, in both servers.
        return self._reject(CHAT_PATH, body, headers, message, err_type="Bad Request", param=param)

    def _error(self, status: int, message: str, err_type: str, param: str | None = None) -> bytes:
        return json.dumps(error_body(self.dialect, status, message, err_type, param)).encode()

    def _record(self, request: ReceivedRequest) -> None:
        with self._shared.lock:
            self._shared.requests.append(request)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.double = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="sglang-double", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> SGLangDouble:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if self.strict and exc_type is None:
            self.assert_no_rejections()


class _Server(ThreadingHTTPServer):
    # a real server's listen backlog (uvicorn: 2048), not socketserver's 5: hundreds of sessions connect at once
    request_queue_size = 1024


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # the head and the body go out in two writes: with Nagle on, the body waits for the peer's delayed ACK (~40 ms a
    # call); uvicorn sets TCP_NODELAY too
    disable_nagle_algorithm = True

    def _double(self) -> SGLangDouble:
        double: SGLangDouble = self.server.double  # type: ignore[attr-defined]
        return double

    def _send(self, status: int, payload: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client hung up while the answer was made (a cancelled call)

    def do_GET(self) -> None:
        self._send(*self._double().handle_get(self.path.split("?", 1)[0]))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        path = self.path.split("?", 1)[0]
        double = self._double()
        if path != CHAT_PATH:
            self._send(*double.handle_post(path, raw, headers))
            return
        shared = double._shared
        arrived = time.monotonic()
        with shared.lock:
            shared.in_flight += 1
            shared.peak_in_flight = max(shared.peak_in_flight, shared.in_flight)
        try:
            answer = double.handle_post(path, raw, headers)
            if (wait := double.delay - (time.monotonic() - arrived)) > 0:
                time.sleep(wait)
        finally:
            with shared.lock:
                shared.in_flight -= 1
        self._send(*answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean; the double records requests itself

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
"""

from __future__ import annotations

import copy
import json
import threading
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

try:
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
except ImportError as exc:  # pragma: no cover - depends on the machine
    raise ImportError("sglang's protocol models are not installed in this venv: run scripts/setup-tests") from exc

__all__ = [
    "ContextLengthError",
    "ErrorReply",
    "ReceivedRequest",
    "Rejection",
    "Reply",
    "SGLangDouble",
    "ScriptItem",
    "ToolCallReply",
]

Dialect = Literal["sglang", "sglang-legacy", "vllm"]
ScriptItem = Reply | ErrorReply | ContextLengthError
CHAT_PATH = "/v1/chat/completions"
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


@dataclass(frozen=True)
class Rejection:
    """A request the real server would have refused, with the reason."""

    path: str
    body: Any
    message: str


@dataclass
class _Shared:
    script: list[ScriptItem]
    requests: list[ReceivedRequest] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    calls: int = 0
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
    ) -> None:
        self.default = default
        self.dialect: Dialect = dialect
        self.eot_id = eot_id
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

    def add(self, *items: ScriptItem) -> None:
        with self._shared.lock:
            self._shared.script.extend(items)

    def tokenize(self, messages: Sequence[Any], tools: Sequence[Any] | None = None) -> list[int]:
        """The prompt ids the double computes for these messages (generation prompt included)."""
        return chatml_ids.prompt_ids(messages, tools, self.eot_id)

    def assert_no_rejections(self) -> None:
        rejections = self.rejections
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
            ids = self.tokenize(body.get("messages") or [], body.get("tools"))
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

        messages = body["messages"]
        prompt = chatml_ids.prompt_pieces(messages, body.get("tools"), self.eot_id)
        unknown = tuple(sorted(set(body) - set(ChatCompletionRequest.model_fields)))
        with self._shared.lock:
            self._shared.calls += 1
            call_no = self._shared.calls
            item = self._shared.script.pop(0) if self._shared.script else self.default
            ids = tuple(i for i, _ in prompt)
            self._shared.requests.append(ReceivedRequest(CHAT_PATH, body, headers, ids, unknown))
        if isinstance(item, ErrorReply):
            return item.status, self._error(item.status, item.message, item.err_type, item.param)
        if isinstance(item, ContextLengthError):
            message, param = context_length_message(self.dialect, len(prompt), item.context_len)
            return 400, self._error(400, message, "BadRequestError", param)
        turn = Turn.build(item, prompt, self.eot_id, call_no)
        if self.dialect == "vllm":
            return 200, json.dumps(vllm_body(request, turn, self.served_model_name)).encode()
        return 200, sglang_body(request, turn, legacy=self.dialect == "sglang-legacy")

    def _reject(
        self,
        path: str,
        body: Any,
        headers: dict[str, str],
        message: str,
        *,
        err_type: str = "BadRequestError",
        param: str | None = None,
    ) -> tuple[int, bytes]:
        with self._shared.lock:
            self._shared.requests.append(ReceivedRequest(path, body, headers))
            self._shared.rejections.append(Rejection(path, body, message))
        return 400, self._error(400, message, err_type, param)

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
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _double(self) -> SGLangDouble:
        double: SGLangDouble = self.server.double  # type: ignore[attr-defined]
        return double

    def _send(self, status: int, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        self._send(*self._double().handle_get(self.path.split("?", 1)[0]))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._send(*self._double().handle_post(self.path.split("?", 1)[0], raw, headers))

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean; the double records requests itself

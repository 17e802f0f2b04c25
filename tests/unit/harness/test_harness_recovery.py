"""A non-zero exit that reports only an error the harness recovered from (opencode after a compaction)."""

from __future__ import annotations

import json

from polar_cli.capture import CaptureRecord
from polar_cli.harness import ADAPTERS
from polar_cli.harness.recovery import recovered

TOOLS = [{"type": "function", "function": {"name": "bash"}}]
OPENCODE = ADAPTERS["opencode"].recovery
OVERFLOW_EVENT = json.dumps(
    {"type": "error", "error": {"name": "APIError", "data": {"message": "maximum context length is 4096 tokens"}}}
).encode()


def record(
    seq: int, *, status: str = "ok", kind: str | None = None, tools: bool = True, finish: str = "stop"
) -> CaptureRecord:
    normalized = {"messages": [{"role": "user", "content": "x"}], **({"tools": TOOLS} if tools else {})}
    return CaptureRecord(
        session_id="s", seq=seq, api="openai_chat", path="/v1/chat/completions", started=0.0, ended=0.0,
        status=status, request={}, normalized=normalized, finish_reason=finish if status == "ok" else None,  # type: ignore[arg-type]
        error_kind=kind,
    )  # fmt: skip


RECOVERED = [
    record(0, finish="tool_calls"),
    record(1, status="upstream_error", kind="context_length"),
    record(2, tools=False),  # the summary
    record(3, finish="tool_calls"),
    record(4),
]


def test_a_compaction_it_finished_after_is_recovered() -> None:
    note = recovered(OPENCODE, 1, b"{}\n" + OVERFLOW_EVENT + b"\n", RECOVERED)
    assert note is not None and "exit 1" in note and "call 4" in note


def test_the_exit_stands_otherwise() -> None:
    assert recovered(OPENCODE, 2, b"", RECOVERED) is None  # another exit code
    assert recovered(None, 1, b"", RECOVERED) is None  # a harness that declares no recovery
    assert recovered(OPENCODE, 1, b"", RECOVERED[:1]) is None  # nothing failed: the exit is its own
    other = [*RECOVERED[:2], record(2, status="upstream_error", kind=None), *RECOVERED[2:]]
    assert recovered(OPENCODE, 1, b"", other) is None  # another failure than an overflow
    assert recovered(OPENCODE, 1, b"", RECOVERED[:4]) is None  # it never reached a final answer
    printed = b'{"type": "error", "error": {"name": "ProviderAuthError", "data": {"message": "bad key"}}}\n'
    assert recovered(OPENCODE, 1, printed, RECOVERED) is None  # it printed another error

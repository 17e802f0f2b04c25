"""A non-zero exit after an error the harness recovered from is not a harness error.

See docs/harnesses.md "Compaction, sub-agents and side calls".

opencode exits 1 when any call of its session failed, even one it then compacted past and finished after. Whether a
run recovered is read from the traffic, never from the exit code alone: every failed call was a context-length
refusal, and after the last refusal the main conversation (the calls that offer tools) went on and ended on a final
answer. The harness's own output must name nothing else as the error (`Recovery.other_errors`). The exit code stays
on the row; the row also says what was recovered from (``recovered``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from polar_cli.capture import CaptureRecord


@dataclass(frozen=True, slots=True)
class Recovery:
    """How a harness reports an error it recovered from: the exit codes it uses for that, and a reader of its
    output that returns the errors it printed other than a context overflow (none: it recovered)."""

    exit_codes: frozenset[int]
    other_errors: Callable[[bytes], list[str]]


def recovered(
    recovery: Recovery | None, exit_code: int | None, output: bytes, records: Sequence[CaptureRecord]
) -> str | None:
    """What the harness recovered from, when its non-zero exit reports only that; None when the exit stands."""
    if recovery is None or exit_code not in recovery.exit_codes:
        return None
    failed = [r for r in records if r.status != "ok"]
    if not failed or any(r.error_kind != "context_length" for r in failed):
        return None
    last = max(r.seq for r in failed)
    main = [r for r in records if r.seq > last and r.status == "ok" and (r.normalized or {}).get("tools")]
    if not main or main[-1].finish_reason != "stop":
        return None
    if recovery.other_errors(output):
        return None
    return (
        f"exit {exit_code} after {len(failed)} context-length refusal(s) it compacted past; the conversation went on"
        f" to a final answer (call {main[-1].seq})"
    )


# how SGLang, vLLM and the gateway word a context-length refusal, as a harness prints it back
_OVERFLOW = re.compile(r"context length|context window|maximum context|too long|context_length|overflow", re.I)


def json_error_events(output: bytes) -> list[str]:
    """The messages of ``{"type": "error", ...}`` lines in a JSON-lines output (opencode's ``--format json``) that
    are not about a context overflow."""
    found: list[str] = []
    for line in output.splitlines():
        line = line.strip()
        if not line.startswith(b"{") or b'"error"' not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("type") != "error":
            continue
        text = json.dumps(event.get("error"))
        if not _OVERFLOW.search(text):
            found.append(text[:300])
    return found

"""Where a session's sampled answers end up in an SFT view of it: the accounting of issue 22's table.

For every ok call, its answer (the assistant message it sampled, ``len(response_ids)`` ids) is:

- trained in its own context: a row's messages hold it without ``"weight": 0``, right after the very messages the
  call was asked (so SFT trains it in the context it was sampled in);
- only re-sent: rows hold it, but only as weight-0 context or after other messages than it was sampled after (an
  SFT trainer that ignores weights would train it out of its context);
- absent: no row holds it.

``before`` is the row of the last turn (one row per session, whose ``messages`` were the trace holding the last
call); ``after`` is the corpus's rows now (one per trace, `Trace.sft_messages`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polar_cli.capture import CaptureRecord
from polar_cli.trajectory import Build
from polar_cli.trajectory.messages import request_messages, response_message


@dataclass(frozen=True)
class Accounting:
    task_in_root: bool
    own: int
    resent: int
    absent: int

    def row(self) -> str:
        return f"{'yes' if self.task_in_root else 'no'} | {self.own:,} / {self.resent:,} / {self.absent:,}"


def before(build: Build) -> list[list[dict[str, Any]]]:
    """The one ``messages`` list a session's row held before lineage: the trace with the session's last call."""
    last = max(build.traces, key=lambda t: max(t.seqs), default=None)
    return [last.messages] if last is not None else []


def after(build: Build) -> list[list[dict[str, Any]]]:
    return [t.to_row()["messages"] for t in build.traces]


def account(records: Sequence[CaptureRecord], views: Sequence[Sequence[Mapping[str, Any]]], task: str) -> Accounting:
    """The accounting of ``views`` (each an SFT row's messages); ``task`` is the instruction the harness was given."""
    own = resent = absent = 0
    for r in records:
        answer = response_message(r.response) if r.status == "ok" else None
        if answer is None or not r.response_ids:
            continue
        context = _plain(request_messages(r.normalized))
        found = trained = False
        for messages in views:
            for k, m in enumerate(messages):
                if m.get("role") != "assistant" or _key(m) != _key(answer):
                    continue
                found = True
                if m.get("weight", 1) != 0 and _plain(messages[:k]) == context:
                    trained = True
        n = len(r.response_ids)
        own += n if trained else 0
        resent += n if found and not trained else 0
        absent += 0 if found else n
    first = views[0] if views else []
    task_in_root = any(m.get("role") == "user" and task in str(m.get("content")) for m in first)
    return Accounting(task_in_root, own, resent, absent)


def _key(message: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """An answer as a harness re-sends it: the text and each call's name and arguments (a harness re-serialises the
    arguments and renames call ids; neither makes it another answer)."""
    calls = tuple(
        (str(c["function"]["name"]), _canonical(c["function"]["arguments"])) for c in message.get("tool_calls") or ()
    )
    return str(message.get("content") or "").strip(), calls


def _canonical(arguments: Any) -> str:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return str(arguments)
    return json.dumps(value, sort_keys=True)


def _plain(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [(str(m.get("role")), str(m.get("content") or "").strip()) for m in messages]

"""What each harness really sends, recorded live on every run: the codec checks run on current traffic.

Each harness with a shell tool (and Terminus-2, which types its commands into a terminal) runs, in a container, a
session of several tool turns through the real gateway in its recording mode (`tests/support/recorder.py`): the
traffic is written in the JSONL shape of tests/data/harness_requests, then read back the way the stored recordings
are read (`recordings.recorded`, `replay.recorded_sessions`): every model call decodes with its API's codec, and the
whole run replays through a fresh in-process gateway on the Qwen3 template with every call answered 200. A new
harness version whose traffic the codecs no longer take fails here, not only in the field. ``POLAR_RECORD_DIR`` keeps
the recordings (to refresh tests/data/harness_requests with current traffic).

What this cannot show: traffic a harness sends to hosts other than the gateway (the stored recordings saw it through a
proxy), and what a real model would have answered (the double answers by a script).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import CaptureWriter
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.probe import with_server_rules
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionSpec, run_session
from polar_cli.inference.gold import asks_for_keystrokes
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.templates import detect_traits
from polar_cli.translate.dialects import SGLANG
from polar_cli.translate.upstream import UpstreamOptions
from tests.integration.harness.shell_policy import (
    CHAT_PATH,
    FINAL_MESSAGE,
    SHELL_TOOLS,
    ShellToolDouble,
    keystrokes_reply,
    offered_tools,
    shell_arguments,
)
from tests.support.gateway import running_gateway
from tests.support.recorder import Recorder
from tests.support.recordings import RECORDINGS, recorded
from tests.support.replay import ReplayUpstream, decoded_messages, recorded_sessions, replay
from tests.support.sglang_double import Reply, ToolCallReply
from tests.support.templates import tokenizer

pytestmark = pytest.mark.integration

# four tool turns: enough for the harnesses' reminders and todo nudges to start showing
COMMANDS = ("pwd", "ls -la", "printf recorded > /testbed/polar_recorded.txt", "git status --short")
SHELL_HARNESSES = [name for name, adapter in ADAPTERS.items() if adapter.shell_tool in SHELL_TOOLS]
# no tools, but a terminal it types each command into (its answers are JSON keystrokes): recorded the same way
KEYSTROKE_HARNESSES = ["terminus-2"]
STORED_KEYS = {"harness", "run", "seq", "t", "method", "path", "headers", "body", "api", "answered"}


class TurnsDouble(ShellToolDouble):
    """The shell policy, one command per tool turn: the k-th request with k-1 tool results runs COMMANDS[k-1]."""

    def __init__(self) -> None:
        super().__init__(COMMANDS[0])

    def handle_post(self, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if path == CHAT_PATH and isinstance(body, dict) and isinstance(body.get("messages"), list):
            with self._policy_lock:
                self.add(turn(body))
            return super(ShellToolDouble, self).handle_post(path, raw, headers)
        return super().handle_post(path, raw, headers)


def turn(body: dict[str, Any]) -> Reply:
    if asks_for_keystrokes(body):  # Terminus-2: one command per answer, then task_complete (asked twice)
        done = sum(1 for m in body["messages"] if isinstance(m, dict) and m.get("role") == "assistant")
        return keystrokes_reply([COMMANDS[done]], False) if done < len(COMMANDS) else keystrokes_reply([], True)
    tools = offered_tools(body)
    shell = next((name for name in SHELL_TOOLS if name in tools), None)
    done = sum(1 for m in body["messages"] if isinstance(m, dict) and m.get("role") == "tool")
    if shell is None or done >= len(COMMANDS):
        return Reply(FINAL_MESSAGE)
    return Reply(tool_calls=(ToolCallReply(shell, shell_arguments(tools[shell], COMMANDS[done])),))


@pytest.mark.parametrize("harness", SHELL_HARNESSES + KEYSTROKE_HARNESSES)
def test_live_traffic_is_recorded_and_the_codecs_take_it(
    harness: str, runtime: DockerRuntime, base_image: str, bundles: dict[str, str], tmp_path: Path
) -> None:
    session_id = f"rec-{harness}-{tmp_path.name}"
    recording = tmp_path / "recordings" / f"{harness}.jsonl"
    with TurnsDouble() as upstream:
        recorder = Recorder(recording, harness, f"{harness}_turns")
        with running_gateway(upstream.url, tmp_path / "capture", upstream_timeout=120.0, record=recorder) as gateway:
            key = gateway.open_session(session_id)
            recorder.secrets = (key,)
            spec = SessionSpec(
                session_id=session_id,
                harness=ADAPTERS[harness],
                image=base_image,
                instruction="Run the commands you are asked to run, one per turn.",
                bundle=bundles[harness],
                timeout=300.0,
            )
            outcome = run_session(runtime, spec, Wiring(gateway.url, key), tmp_path / "artifacts")
            gateway.flush()
    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    if keep := os.environ.get("POLAR_RECORD_DIR"):
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(recording, Path(keep) / recording.name)

    lines = [json.loads(line) for line in recording.read_text().splitlines()]
    calls = [line for line in lines if line.get("api")]
    assert len(calls) >= len(COMMANDS) + 1, [(c["seq"], c["path"]) for c in calls]
    assert all(set(c) >= STORED_KEYS for c in calls)
    assert all(c["answered"] == "ok" for c in calls), [(c["seq"], c["answered"]) for c in calls]
    assert key not in recording.read_text()  # the session key never lands in a recording
    stored = recorded(directory=RECORDINGS)[0]
    assert set(calls[0]) <= set(stored) | {"query"}  # the stored recordings' shape

    for c in calls:  # every call decodes with its API's codec
        assert decoded_messages_of(c)
    sessions = recorded_sessions(directory=recording.parent)
    assert [s.run for s in sessions] == [f"{harness}_turns"]
    outcomes = asyncio.run(replayed(sessions[0]))
    assert [o.status for o in outcomes] == [200] * len(outcomes), [(o.call.seq, o.error) for o in outcomes]


def decoded_messages_of(call: dict[str, Any]) -> list[dict[str, Any]]:
    from urllib.parse import urlencode

    from tests.support.recordings import API_OF_LABEL

    query = urlencode(call.get("query") or {}, doseq=True)
    return decoded_messages(API_OF_LABEL[call["api"]], call["path"], query, call["body"])


async def replayed(session: Any) -> list[Any]:
    tk = tokenizer("qwen3")
    upstream = ReplayUpstream(tk)
    registry = SessionRegistry()
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"polar-replay-{session.id}-{os.getpid()}"
    capture = CaptureWriter(work)
    gateway = Gateway(
        upstream=upstream,
        options=UpstreamOptions(model="replay"),
        sessions=registry,
        capture=capture,
        traits=with_server_rules(detect_traits(tk.template), SGLANG),
    )
    key = f"key-{session.id}"
    registry.open(session.id, key)
    try:
        return await replay(gateway, upstream, session, key, thinking=False)
    finally:
        capture.close()
        await gateway.close()
        shutil.rmtree(work, ignore_errors=True)

"""Each real harness, in a container, through the real gateway, against a scripted SGLang double.

One session per harness checks it all: the harness calls its own shell tool (found from the tools it sent), the tool
really runs in the container, the next request carries the tool result, every call is captured with token ids, and a
shell-hostile instruction reaches the harness byte for byte. A hanging harness is killed at its timeout.
"""

from __future__ import annotations

import shlex
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import CaptureRecord, read_capture_dir
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionOutcome, SessionSpec, run_session
from polar_cli.runtime.base import Container
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.translate.openai_responses_tools import flat_name
from tests.integration.harness.shell_policy import ShellToolDouble
from tests.support.gateway import running_gateway

pytestmark = pytest.mark.integration

PROBE = "/testbed/polar_probe.txt"
PWNED = "/tmp/polar-pwned"
# Starts with a dash (an option to a naive parser); quotes, command substitution, backticks, globs, a backslash,
# newlines, a tab and non-ASCII: any shell or parser on the way would change or run part of it.
HOSTILE = (
    "--yolo -p 'single' \"double\" $(touch /tmp/polar-pwned) `touch /tmp/polar-pwned` ; | & > < * ? ~ \\n \\\n"
    'second line\twith a tab, ünïcödé \u2013 日本語 🚀 and a "final quote"'
)
SESSION_TIMEOUT = 300.0


def strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):  # capture bodies are lazily parsed Mappings
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def session_containers(runtime: DockerRuntime, session_id: str) -> list[str]:
    found = runtime.client.api.containers(all=True, filters={"label": f"polar.session={session_id}"})
    return [c["Id"] for c in found]


def run_one(
    runtime: DockerRuntime,
    harness: str,
    image: str,
    bundle: str,
    upstream_url: str,
    tmp_path: Path,
    *,
    timeout: float = SESSION_TIMEOUT,
    after_run: Any = None,
    upstream_timeout: float = 120.0,
    model: str | None = None,
) -> tuple[SessionOutcome, list[CaptureRecord]]:
    session_id = f"it-{harness}-{tmp_path.name}"
    capture = tmp_path / "capture"
    with running_gateway(upstream_url, capture, upstream_timeout=upstream_timeout) as gateway:
        key = gateway.open_session(session_id)
        spec = SessionSpec(
            session_id=session_id,
            harness=ADAPTERS[harness],
            image=image,
            instruction=HOSTILE,
            bundle=bundle,
            timeout=timeout,
        )
        wiring = Wiring(gateway.url, key, model)
        outcome = run_session(runtime, spec, wiring, tmp_path / "artifacts", after_run=after_run)
        gateway.flush()
    assert session_containers(runtime, session_id) == [], "the session's container outlived it"
    return outcome, read_capture_dir(capture).get(session_id, [])


@pytest.mark.parametrize("harness", list(ADAPTERS))
def test_harness_runs_its_shell_tool_through_the_gateway(
    harness: str, runtime: DockerRuntime, base_image: str, bundles: dict[str, str], tmp_path: Path
) -> None:
    content = f"made by {harness} via its shell tool"
    # a harness without a shell tool (aider) writes the file from an edit block in its reply, ending in a newline
    shell_tool = ADAPTERS[harness].shell_tool
    seen: dict[str, Any] = {}

    def inspect(container: Container) -> None:
        seen["probe"] = container.get_file(PROBE)
        seen["pwned"] = container.exec(["test", "-e", PWNED], timeout=30).exit_code == 0

    command = f"printf %s {shlex.quote(content)} > {PROBE}"
    edit = None if shell_tool else (Path(PROBE).name, content)
    with ShellToolDouble(command, edit=edit) as upstream:
        outcome, records = run_one(
            runtime, harness, base_image, bundles[harness], upstream.url, tmp_path, after_run=inspect
        )

    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    assert outcome.exit_code == 0
    # the tool really ran in the container, and its file is in the patch
    assert seen["probe"] == content.encode() + (b"" if shell_tool else b"\n")
    assert f"+++ b/{Path(PROBE).name}" in outcome.patch and content in outcome.patch
    # the instruction arrived whole, and nothing in it was executed
    assert any(HOSTILE in s for s in strings(records[0].request)), f"instruction altered in {records[0].request}"
    assert seen["pwned"] is False
    # every call captured with token ids; at least the tool call and the final answer (the edit, without tools)
    ok = [r for r in records if r.status == "ok" and r.prompt_ids and r.response_ids]
    assert len(ok) >= (2 if shell_tool else 1), [(r.seq, r.status, r.error) for r in records]
    if not shell_tool:
        return
    # the request after the tool call carries the shell tool's result, paired with that call
    later = [r for r in records if r.seq > 0 and r.normalized is not None]
    assert any(carries_tool_result(r, ADAPTERS[harness].shell_tool) for r in later), "no request carried the result"


def test_codex_with_an_unknown_model_name_completes_a_tool_turn(
    runtime: DockerRuntime, base_image: str, bundles: dict[str, str], tmp_path: Path
) -> None:
    """Codex has no metadata for this name, so it sends its multi-agent tools as a ``namespace`` (issue 12)."""
    seen: dict[str, Any] = {}

    def inspect(container: Container) -> None:
        seen["probe"] = container.get_file(PROBE)

    with ShellToolDouble(f"printf %s namespaced > {PROBE}") as upstream:
        outcome, records = run_one(
            runtime, "codex", base_image, bundles["codex"], upstream.url, tmp_path, after_run=inspect,
            model="qwen3.5-122b-a10b",
        )  # fmt: skip
    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    assert seen["probe"] == b"namespaced"
    assert [r.status for r in records] == ["ok"] * len(records), [(r.seq, r.error) for r in records]
    first = records[0].request
    assert first["model"] == "qwen3.5-122b-a10b"
    namespaces = [t for t in first["tools"] if t.get("type") == "namespace"]
    assert namespaces, [t.get("type") for t in first["tools"]]
    # the upstream was offered the namespace's members as flat functions
    assert records[0].normalized is not None
    offered = {t["function"]["name"] for t in records[0].normalized["tools"]}
    assert all(flat_name(ns["name"], t["name"]) in offered for ns in namespaces for t in ns["tools"])
    assert any(carries_tool_result(r, "exec_command") for r in records if r.normalized is not None)


def carries_tool_result(record: CaptureRecord, shell_tool: str) -> bool:
    assert record.normalized is not None
    messages = record.normalized["messages"]
    call_ids = {
        call["id"]
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
        if call["function"]["name"] == shell_tool
    }
    return any(m.get("role") == "tool" and m.get("tool_call_id") in call_ids for m in messages)


@contextmanager
def silent_upstream() -> Iterator[str]:
    """An upstream that accepts connections and never answers: the harness waits on its model forever."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.parametrize("harness", list(ADAPTERS))
def test_hanging_harness_is_killed_at_its_timeout(
    harness: str, runtime: DockerRuntime, base_image: str, bundles: dict[str, str], tmp_path: Path
) -> None:
    timeout = 8.0
    with silent_upstream() as url:
        outcome, records = run_one(
            runtime, harness, base_image, bundles[harness], url, tmp_path, timeout=timeout, upstream_timeout=600.0
        )
    assert outcome.status == "timeout", outcome
    assert outcome.exit_code is None
    assert outcome.error is not None and "timeout" in outcome.error
    # killed at the deadline (which counts from INIT), not when the harness gave up by itself
    assert timeout - 0.5 <= outcome.timings["init"] + outcome.timings["run"] <= timeout + 10
    # POSTRUN still ran: the (empty) patch was collected
    assert outcome.patch == "" and outcome.base_commit
    assert all(r.status != "ok" for r in records)

"""Harnesses in the environments users give them, not only the happy path of the other tests.

- Codex with an MCP server configured and a served model's name: Codex >= 0.120 offers an MCP server's tools as a
  ``namespace``; the model calls one, Codex runs it on the real (stdio) server in the container and sends the result
  back.
- A ``node`` on the instance's PATH that is not the bundle's (here one that fails and leaves a mark): every harness
  still runs on its bundle's own Node. (The other tests run with no node on PATH at all: the base image has none.)
- Claude Code without ``IS_SANDBOX``: as root it refuses ``--dangerously-skip-permissions``; the session ends at
  once with Claude Code's own reason, never a hang (this is why the adapter sets it).

The model is the scripted SGLang double; what it cannot show is what a real model would call.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import CaptureRecord, read_capture_dir
from polar_cli.harness import ADAPTERS, HarnessAdapter, Launch, Wiring
from polar_cli.harness.session import SessionOutcome, SessionSpec, run_session
from polar_cli.runtime.base import Container
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.translate.openai_responses_tools import flat_name
from tests.integration.harness.shell_policy import CHAT_PATH, SHELL_TOOLS, ShellToolDouble
from tests.support.gateway import running_gateway
from tests.support.sglang_double import Reply, SGLangDouble, ToolCallReply

pytestmark = pytest.mark.integration

MCP_SCRIPT = "/tmp/polar-mcp-server.js"
MCP_MARK = "/tmp/polar-mcp-called"
# a minimal MCP server over stdio (newline-delimited JSON-RPC 2.0): one tool, which leaves a mark when called
MCP_SERVER = r"""
const fs = require("fs");
const readline = require("readline");
const send = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let msg;
  try { msg = JSON.parse(line); } catch { return; }
  if (msg.id === undefined) return;  // notifications
  if (msg.method === "initialize") {
    send({ jsonrpc: "2.0", id: msg.id, result: {
      protocolVersion: (msg.params && msg.params.protocolVersion) || "2025-06-18",
      capabilities: { tools: {} }, serverInfo: { name: "polar-echo", version: "1.0.0" } } });
  } else if (msg.method === "tools/list") {
    send({ jsonrpc: "2.0", id: msg.id, result: { tools: [{
      name: "echo_text", description: "Echo the text back.",
      inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] } }] } });
  } else if (msg.method === "tools/call") {
    const text = String((msg.params.arguments || {}).text);
    fs.writeFileSync("/tmp/polar-mcp-called", text);
    send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "echo: " + text }] } });
  } else {
    send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "no such method" } });
  }
});
"""
# a served open model's name, unknown to Codex: it offers MCP tools as a namespace up front (with a name it knows,
# such as its default gpt-5.5, it defers them behind tool_search, which the gateway cannot run)
OPEN_MODEL = "qwen3.5-122b-a10b"
FAKE_NODE = "#!/bin/sh\ntouch /tmp/polar-wrong-node\necho 'not the bundle node' >&2\nexit 1\n"


def with_launch(adapter: HarnessAdapter, change: Callable[[Launch], Launch]) -> HarnessAdapter:
    """The adapter with its launch changed the way a user's environment would change it."""

    def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
        return change(adapter.build(instruction, wiring, workdir))

    return dataclasses.replace(adapter, build=build)


def run(
    runtime: DockerRuntime,
    adapter: HarnessAdapter,
    image: str,
    bundle: str,
    upstream_url: str,
    tmp_path: Path,
    after_run: Callable[[Container], None] | None = None,
    model: str | None = None,
) -> tuple[SessionOutcome, list[CaptureRecord]]:
    session_id = f"env-{adapter.name}-{tmp_path.name}"
    with running_gateway(upstream_url, tmp_path / "capture", upstream_timeout=120.0) as gateway:
        key = gateway.open_session(session_id)
        spec = SessionSpec(
            session_id=session_id,
            harness=adapter,
            image=image,
            instruction="Use the tool you are given.",
            bundle=bundle,
            timeout=240.0,
        )
        wiring = Wiring(gateway.url, key, model)
        outcome = run_session(runtime, spec, wiring, tmp_path / "artifacts", after_run=after_run)
        gateway.flush()
    return outcome, read_capture_dir(tmp_path / "capture").get(session_id, [])


class McpDouble(SGLangDouble):
    """Calls the MCP server's tool (by the flat name the gateway offered) once, then answers ``done``."""

    def handle_post(self, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        body = json.loads(raw) if path == CHAT_PATH else None
        if isinstance(body, dict):
            names = [t["function"]["name"] for t in body.get("tools") or [] if "function" in t]
            echo = next((n for n in names if n.endswith("echo_text")), None)
            answered = any(m.get("role") == "tool" for m in body.get("messages") or [])
            if echo is None or answered:
                self.add(Reply("done"))
            else:
                self.add(Reply(tool_calls=(ToolCallReply(echo, {"text": "through mcp"}),)))
        return super().handle_post(path, raw, headers)


def test_codex_calls_an_mcp_servers_namespaced_tool(
    runtime: DockerRuntime, base_image: str, bundles: dict[str, str], tmp_path: Path
) -> None:
    codex = ADAPTERS["codex"]
    node = f"{codex.bundle_dir}/bin/node"

    def add_mcp(launch: Launch) -> Launch:
        (config_path,) = [p for p in launch.files if p.endswith("config.toml")]
        config = launch.files[config_path].decode()
        config += f'\n[mcp_servers.polar_echo]\ncommand = "{node}"\nargs = ["{MCP_SCRIPT}"]\n'
        files = {**launch.files, config_path: config.encode(), MCP_SCRIPT: MCP_SERVER.encode()}
        return dataclasses.replace(launch, files=files)

    seen: dict[str, Any] = {}

    def inspect(container: Container) -> None:
        seen["mark"] = container.get_file(MCP_MARK)

    with McpDouble() as upstream:
        outcome, records = run(
            runtime, with_launch(codex, add_mcp), base_image, bundles["codex"], upstream.url, tmp_path, inspect,
            model=OPEN_MODEL,
        )  # fmt: skip
    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    assert seen["mark"] == b"through mcp", "Codex never ran the MCP tool"
    assert [r.status for r in records] == ["ok"] * len(records), [(r.seq, r.error) for r in records]
    namespaces = [t for t in records[0].request["tools"] if t.get("type") == "namespace"]
    mcp = [ns for ns in namespaces if any(t.get("name") == "echo_text" for t in ns["tools"])]
    assert mcp, [(t.get("type"), t.get("name")) for t in records[0].request["tools"]]
    offered = {t["function"]["name"] for t in records[0].normalized["tools"]}  # type: ignore[index]
    assert flat_name(mcp[0]["name"], "echo_text") in offered
    # the next request carries the tool's output for the namespaced call
    outputs = [i for i in records[-1].request["input"] if i.get("type") == "function_call_output"]
    assert any("echo: through mcp" in json.dumps(o) for o in outputs), outputs


@pytest.fixture(scope="module")
def fake_node_image(runtime: DockerRuntime, base_image: str) -> str:
    tag = "polar-test/fake-node-on-path:1"
    dockerfile = f"FROM {base_image}\nCOPY node /usr/local/bin/node\nRUN chmod 0755 /usr/local/bin/node\n"
    runtime.build({"Dockerfile": dockerfile.encode(), "node": FAKE_NODE.encode()}, tag, log=lambda _: None)
    return tag


@pytest.mark.parametrize("harness", [h for h, a in ADAPTERS.items() if a.shell_tool in SHELL_TOOLS])
def test_a_foreign_node_on_path_is_never_used(
    harness: str, runtime: DockerRuntime, fake_node_image: str, bundles: dict[str, str], tmp_path: Path
) -> None:
    probe = "/testbed/polar_node_probe.txt"
    seen: dict[str, Any] = {}

    def inspect(container: Container) -> None:
        seen["probe"] = container.get_file(probe)
        seen["wrong"] = container.exec(["test", "-e", "/tmp/polar-wrong-node"], timeout=30).exit_code == 0

    command = f"printf %s {shlex.quote('bundle node')} > {probe}"
    with ShellToolDouble(command) as upstream:
        outcome, _ = run(runtime, ADAPTERS[harness], fake_node_image, bundles[harness], upstream.url, tmp_path, inspect)
    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    assert seen["probe"] == b"bundle node"
    assert seen["wrong"] is False, "the harness ran the node on PATH"


def test_claude_code_without_is_sandbox_ends_at_once_with_its_reason(
    runtime: DockerRuntime, base_image: str, bundles: dict[str, str], tmp_path: Path
) -> None:
    def no_sandbox(launch: Launch) -> Launch:
        return dataclasses.replace(launch, env={k: v for k, v in launch.env.items() if k != "IS_SANDBOX"})

    start = time.monotonic()
    with ShellToolDouble("true") as upstream:
        outcome, records = run(
            runtime,
            with_launch(ADAPTERS["claude-code"], no_sandbox),
            base_image,
            bundles["claude-code"],
            upstream.url,
            tmp_path,
        )
    assert outcome.exit_code not in (None, 0), outcome.status
    assert "dangerously-skip-permissions" in outcome.output, outcome.output[-2000:]
    assert time.monotonic() - start < 90, "it must refuse at once, not hang until the 240 s timeout"
    assert records == []  # it never called the model

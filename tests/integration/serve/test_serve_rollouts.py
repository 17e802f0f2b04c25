"""`polar serve` as an RL trainer uses it: a real `polar serve` process, a real harness (Pi) in gateway-only Docker
sandboxes on the demo instances, the scripted gold and noop engines (with the real Qwen3 tokenizer and template), real
grading. A fake trainer submits through `polar_cli.client`; callbacks go to a receiver on loopback.

What the scripted engines cannot show: a real model's sampling (the gold engine answers the same patch every time),
and SGLang's own abort of a running generation (the in-process engine's answer is simply cancelled).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from polar_cli.capture import read_session
from tests.integration.serve.serve_process import (
    DEMO_IDS,
    Receiver,
    assert_token_exact,
    containers_of,
    instance_task,
    service,
    wait_for,
)

pytestmark = pytest.mark.integration
TIMEOUT = 900


def sse_states(url: str, task_id: str) -> list[dict[str, Any]]:
    events = []
    with httpx.stream("GET", f"{url}/v1/tasks/{task_id}/events", timeout=60) as response:
        kind = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind == "session":
                events.append(json.loads(line[6:]))
            elif kind == "end":
                break
    return events


def test_a_trainer_gets_groups_of_token_exact_trajectories_with_rewards(tmp_path: Path) -> None:
    receiver = Receiver()
    try:
        with service(tmp_path / "gold", {"kind": "gold"}) as gold:
            ids = [f"gold-{i}" for i in range(3)]
            for task_id, instance_id in zip(ids, DEMO_IDS, strict=False):
                status = gold.client.submit(
                    instance_task(task_id, instance_id, 4, callback_url=receiver.url, metadata={"step": 1})
                )
                assert status["created"] and status["state"] in ("queued", "running")
            results = {r.task_id: r for r in gold.client.iter_results(ids, timeout=TIMEOUT)}
            wait_for(lambda: len(receiver.posts) >= 3, 60, "the callbacks")
            time.sleep(1.0)  # a second delivery, if any, would come now
            events = sse_states(gold.url, ids[0])
            state_dir = tmp_path / "gold" / "state"
            for result in results.values():
                assert result.state == "completed" and result.rewards == [1.0] * 4, result.raw["sessions"]
                assert result.metadata == {"step": 1}
                for session in result.sessions:
                    assert session["status"] == "completed" and not session["masked"]
                    assert session["seed"] == 7 + session["index"]
                    assert_token_exact(state_dir, session)
            assert sorted(receiver.idempotency_keys()) == sorted(ids)  # once per task
            assert all(payload["done"] and len(payload["sessions"]) == 4 for _, payload in receiver.posts)
            # events: every sample went through the stages in order, and the task ended
            assert [e["id"] for e in events] == list(range(1, len(events) + 1))
            for sample in range(4):
                states = [e["state"] for e in events if e["sample"] == sample]
                assert states == ["queued", "init", "ready", "running", "postrun", "completed"], states
            assert events[-1]["state"] == "done"
        with service(tmp_path / "noop", {"kind": "noop"}) as noop:
            noop.client.submit(instance_task("noop-0", DEMO_IDS[0], 4))
            result = noop.client.wait("noop-0", timeout=TIMEOUT)
            assert result.rewards == [0.0] * 4 and result.mean_reward == 0.0
            for session in result.sessions:
                assert session["status"] == "completed" and session["reason"].startswith("no_patch")
                assert not session["masked"] and session["traces"]  # a zero reward to learn from
    finally:
        receiver.close()


def test_cancel_mid_run_removes_every_container_and_ends_the_task(tmp_path: Path) -> None:
    with service(tmp_path, {"kind": "gold", "latency": 5.0}) as svc:
        svc.client.submit(instance_task("cancel-me", DEMO_IDS[0], 4))
        wait_for(lambda: svc.client.get("cancel-me").raw["sessions_in_flight"].get("running"), TIMEOUT, "a run")
        svc.client.cancel("cancel-me")
        result = svc.client.wait("cancel-me", timeout=300)
        assert result.state == "cancelled" and [s["status"] for s in result.sessions] == ["cancelled"] * 4
        assert all(s["masked"] for s in result.sessions)
        wait_for(lambda: not containers_of("polar.task=cancel-me"), 60, "the containers to go")
        # the service goes on serving
        assert svc.client.status()["tasks"] == {"cancelled": 1}


def test_kill_9_of_the_service_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    receiver = Receiver()
    state = tmp_path / "state"
    try:
        with service(tmp_path, {"kind": "gold", "latency": 1.0}) as first:
            first.client.submit(instance_task("k-0", DEMO_IDS[0], 2, callback_url=receiver.url))
            first.client.submit(instance_task("k-1", DEMO_IDS[1], 4, callback_url=receiver.url))
            before = first.client.wait("k-0", timeout=TIMEOUT).raw
            wait_for(lambda: first.client.get("k-1").raw["sessions_in_flight"].get("running"), TIMEOUT, "k-1 runs")
            os.kill(first.proc.pid, signal.SIGKILL)
            first.proc.wait(30)
        with service(tmp_path, {"kind": "gold", "latency": 1.0}) as second:
            after = second.client.get("k-0").raw
            assert after["sessions"] == before["sessions"]  # served again, unchanged
            k1 = second.client.wait("k-1", timeout=TIMEOUT)
            assert k1.rewards == [1.0] * 4
            wait_for(lambda: "k-1" in receiver.idempotency_keys(), 60, "k-1's callback")
        for task_id, n in (("k-0", 2), ("k-1", 4)):
            rows = [json.loads(line) for line in (state / "results" / f"{task_id}.jsonl").read_text().splitlines()]
            assert sorted(r["index"] for r in rows) == list(range(n))  # none lost, none twice
        # k-0's callback may have come before the kill and again after it: the same idempotency key every time
        assert set(receiver.idempotency_keys()) == {"k-0", "k-1"}
        # the killed process's containers were swept by the restart, the restart's own removed as it stopped
        assert not containers_of("polar.task=k-1") and not containers_of("polar.task=k-0")
    finally:
        receiver.close()


def weight_versions(state: Path, session_id: str) -> list[str | None]:
    records = read_session(state / "capture" / f"{session_id}.jsonl")
    return [r.weight_version for r in records if r.status == "ok"]


@pytest.mark.parametrize("mode", ["abort", "drain"])
def test_a_weight_sync_mid_session_pauses_and_every_session_completes(tmp_path: Path, mode: str) -> None:
    with service(tmp_path, {"kind": "gold", "latency": 3.0}) as svc:
        svc.client.set_weights("v1")
        svc.client.submit(instance_task("sync", DEMO_IDS[0], 2))
        wait_for(lambda: svc.client.status()["gate"]["in_flight"], TIMEOUT, "a model call in flight", step=0.05)
        paused = svc.client.pause(mode)
        assert paused["paused"] and paused["calls"] >= 1
        svc.client.set_weights("v2")
        assert svc.client.status()["gate"]["in_flight"] == 0
        time.sleep(1.0)  # calls that come now wait at the gate
        svc.client.resume()
        result = svc.client.wait("sync", timeout=TIMEOUT)
        assert result.rewards == [1.0, 1.0]
        versions = [weight_versions(tmp_path / "state", s["session_id"]) for s in result.sessions]
        # every call answered after the pause was sampled under v2; with drain, the call in flight finished on v1
        assert all(v[-1] == "v2" for v in versions), versions
        if mode == "abort":
            assert "v1" not in {x for v in versions for x in v[1:]}
        assert {x for s in result.sessions for x in s["weight_versions"]} <= {"v1", "v2"}


def test_instruction_tasks_are_graded_by_a_command_or_by_completion(tmp_path: Path) -> None:
    """No instance: an instruction in an image. The noop engine changes nothing, so the command's tests see the base
    repository: those expected to pass do (reward 1.0), one expected to fail does not (0.0, with what was seen)."""
    image = {"image": "polar-demo/csvsift:1.2"}
    pytest_cmd = "python3 -m pytest -rA --tb=no -p no:cacheprovider tests/test_paging.py"
    passing = {"tests/test_paging.py::test_first_page": "PASSED", "tests/test_paging.py::test_last_full_page": "PASSED"}
    with service(tmp_path, {"kind": "noop"}) as svc:
        base = {"instruction": "Look around; change nothing.", "harness": "pi", "runtime": image, "num_samples": 1}
        command = {"type": "command", "command": pytest_cmd}
        svc.client.submit({**base, "task_id": "cmd-ok", "evaluator": {**command, "expected": passing}})
        wrong = {**passing, "tests/test_paging.py::test_first_page": "FAILED"}
        svc.client.submit({**base, "task_id": "cmd-wrong", "evaluator": {**command, "expected": wrong}})
        svc.client.submit({**base, "task_id": "done-ok"})  # session_completed, the default without an instance
        ok, bad, done = (svc.client.wait(t, timeout=TIMEOUT) for t in ("cmd-ok", "cmd-wrong", "done-ok"))
    assert ok.rewards == [1.0], ok.sessions
    assert ok.sessions[0]["evaluation"]["observed"] == passing
    assert bad.rewards == [0.0] and bad.sessions[0]["reason"].startswith("unresolved")
    assert bad.sessions[0]["evaluation"]["observed"]["tests/test_paging.py::test_first_page"] == "PASSED"
    assert done.rewards == [1.0] and done.sessions[0]["evaluation"] == {"type": "session_completed", "completed": True}


@pytest.mark.parametrize(("engine", "reward"), [("gold", 1.0), ("noop", 0.0)])
def test_the_example_trainer_loop_runs_against_its_own_service(engine: str, reward: float) -> None:
    """examples/grpo_loop.py as a user runs it: it launches `polar serve`, submits a group, reads rewards and token
    fields, computes advantages, brackets the weight update with pause and resume."""
    import subprocess
    import sys

    from tests.integration.serve.serve_process import ROOT

    argv = [sys.executable, "examples/grpo_loop.py", "--launch", engine, "--prompts", "1", "--group", "2"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-4000:]
    step = json.loads(done.stdout.strip().splitlines()[-1])
    assert step["step"] == 0 and step["rows"] == 2 and step["trainable_tokens"] > 0
    assert step["groups"][0]["rewards"] == [reward, reward]

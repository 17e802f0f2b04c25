"""What a trainer asks of its rows (`serve.shaping`): masked rewards are null (0.0 on request), versions ordered by
number, a sample that straddled a weight change says so (and is masked on request), one row per sample on request,
the logprob mode on every trace; the stream of finished tasks and the engine list over HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from polar_cli.serve.service import RolloutService
from polar_cli.serve.shaping import main_trace, ordered_versions, shape, weight_step
from polar_cli.serve.simulated import SimulatedNode, Simulation
from tests.unit.serve.test_serve_api import run as run_http
from tests.unit.serve.test_serve_service import run, task


def test_versions_order_by_their_trailing_number_then_name() -> None:
    assert ordered_versions(["step-9", "step-10", "base", "step-9", "step-100"]) == [
        "base",
        "step-9",
        "step-10",
        "step-100",
    ]
    assert weight_step("step-10") == 10 and weight_step("base") is None and weight_step(None) is None


def _trace(kind: str, trained: int, **extra: Any) -> dict[str, Any]:
    ids = list(range(trained + 1))
    mask = [1] * trained + [0]
    return {"response_ids": ids, "loss_mask": mask, "weight_versions": [], "lineage": {"kind": kind}} | extra


def test_one_row_per_sample_keeps_the_main_trace_with_env_mask_and_counts_the_dropped() -> None:
    traces = [_trace("root", 3), _trace("side", 9), _trace("continuation", 5), _trace("subagent", 7)]
    assert main_trace(traces) == 2 and main_trace([_trace("side", 1)]) == 0 and main_trace([]) is None
    result = {"status": "completed", "masked": False, "reward": 1.0, "traces": traces, "weight_versions": ["v1"]}
    shaped = shape(result, {"rows": "main"}, logprobs_mode="raw_logprobs")
    assert shaped["dropped_traces"] == 3 and len(shaped["traces"]) == 1
    (row,) = shaped["traces"]
    assert row["lineage"]["kind"] == "continuation" and row["env_mask"] == [1] * 5 + [0]
    assert row["logprobs_mode"] == "raw_logprobs"
    assert shape(result, None)["dropped_traces"] == 0 and len(shape(result, None)["traces"]) == 4


def test_masked_sessions_have_no_reward_unless_the_trainer_wants_zero(tmp_path: Path) -> None:
    sim = Simulation(init=0.01, run=0.01, postrun=0.01, errors={"a": 99, "b": 99, "c": 99})

    async def body(svc: RolloutService, node: SimulatedNode) -> list[dict[str, Any]]:
        svc.submit(task("a", 1))
        svc.submit(task("b", 1, trainer={"masked_reward": "zero"}))
        return [await svc.wait(t, 30) for t in ("a", "b")]

    a, b = run(tmp_path / "1", body, sim=sim, session_retries=0)
    assert a["sessions"][0]["masked"] and a["sessions"][0]["reward"] is None and a["mean_reward"] is None
    assert b["sessions"][0]["masked"] and b["sessions"][0]["reward"] == 0.0

    async def zero(svc: RolloutService, node: SimulatedNode) -> dict[str, Any]:
        svc.submit(task("c", 1))
        return await svc.wait("c", 30)

    c = run(tmp_path / "2", zero, sim=sim, session_retries=0, masked_reward="zero")
    assert c["sessions"][0]["reward"] == 0.0


def test_a_sample_that_straddles_a_weight_change_lists_both_and_on_policy_only_masks_it(tmp_path: Path) -> None:
    sim = Simulation(init=0.01, run=0.4, postrun=0.01, success=1.0)

    async def body(svc: RolloutService, node: SimulatedNode) -> list[dict[str, Any]]:
        await svc.set_weights("step-9")
        svc.submit(task("mixed", 2))
        svc.submit(task("strict", 2, trainer={"on_policy_only": True}))
        await asyncio.sleep(0.2)  # every run has begun under step-9
        await svc.set_weights("step-10")
        svc.submit(task("after", 1, trainer={"on_policy_only": True}))
        return [await svc.wait(t, 30) for t in ("mixed", "strict", "after")]

    mixed, strict, after = run(tmp_path, body, sim=sim, limits=_wide())
    for s in mixed["sessions"]:
        assert s["weight_versions"] == ["step-9", "step-10"] and s["off_policy"] and not s["masked"]
        assert (s["weight_step_min"], s["weight_step_max"]) == (9, 10) and s["reward"] == 1.0
    for s in strict["sessions"]:
        assert s["masked"] and s["masked_reason"] == "off_policy" and s["reward"] is None
        assert s["reason"] == "off_policy: saw weight versions step-9, step-10"
        assert all(set(t["loss_mask"]) == {0} for t in s["traces"])
    assert strict["usable"] == 0 and strict["mean_reward"] is None
    (s,) = after["sessions"]
    assert s["weight_versions"] == ["step-10"] and not s["off_policy"] and not s["masked"] and s["reward"] == 1.0


def _wide() -> Any:
    from polar_cli.node.pools import PoolLimits

    return PoolLimits(init=8, run=8, postrun=8, ready=8)


def test_every_trace_says_its_logprob_mode(tmp_path: Path) -> None:
    async def body(svc: RolloutService, node: SimulatedNode) -> dict[str, Any]:
        svc.submit(task("t", 2))
        return await svc.wait("t", 30)

    result = run(tmp_path, body, logprobs_mode="processed_logprobs")
    assert [t["logprobs_mode"] for s in result["sessions"] for t in s["traces"]] == ["processed_logprobs"] * 2


def test_finished_tasks_stream_with_a_cursor_and_engines_list_their_version(tmp_path: Path) -> None:
    async def body(client: httpx.AsyncClient, svc: RolloutService) -> None:
        empty = (await client.get("/v1/results", params={"after": 0, "wait": 0.05})).json()
        assert empty == {"tasks": [], "cursor": 0}
        body = {"instruction": "x", "runtime": {"image": "img"}, "harness": "pi", "num_samples": 2}
        for t in ("t1", "t2", "t3"):
            assert (await client.post("/v1/tasks", json={"task_id": t, **body})).status_code == 202
        got: list[str] = []
        cursor = 0
        while len(got) < 3:
            page = (await client.get("/v1/results", params={"after": cursor, "wait": 10, "limit": 2})).json()
            assert page["tasks"] and len(page["tasks"]) <= 2 and all(t["done"] for t in page["tasks"])
            assert all(len(t["sessions"]) == 2 for t in page["tasks"])
            got += [t["task_id"] for t in page["tasks"]]
            cursor = page["cursor"]
        assert sorted(got) == ["t1", "t2", "t3"] and cursor == 3
        again = (await client.get("/v1/results", params={"after": 1, "sessions": 0})).json()
        assert [t["task_id"] for t in again["tasks"]] == got[1:] and "sessions" not in again["tasks"][0]
        bad = await client.get("/v1/results", params={"after": "x"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "after"
        assert (await client.post("/v1/results")).status_code == 405

        nothing = await client.post("/v1/admin/weights", json={"weight_version": "s", "weights_path": "/ckpt"})
        assert nothing.status_code == 400 and nothing.json()["error"]["field"] == "weights_path"
        await client.post("/v1/admin/weights", json={"weight_version": "step-3"})
        engines = (await client.get("/v1/engines")).json()
        assert engines["weight_version"] == "step-3"
        assert engines["engines"] == [
            {
                "node_id": "simulated",
                "url": "sim://engine-0",
                "kind": "simulated",
                "weight_version": "step-3",
                "in_rotation": True,
            }
        ]

    run_http(tmp_path, body)


def test_a_task_bounds_the_tokens_its_sessions_may_sample() -> None:
    import pytest
    from pydantic import ValidationError

    assert task("t", 1, max_sampled_tokens=4096).max_sampled_tokens == 4096
    with pytest.raises(ValidationError, match="max_sampled_tokens"):
        task("t", 1, max_sampled_tokens=0)


def test_time_paused_for_a_weight_sync_is_credited_to_session_deadlines(tmp_path: Path) -> None:
    """A session of 0.4 s of work under a 0.8 s timeout, paused 1 s in the middle of its run: it completes (without
    the credit it would end as a trainable timeout at reward 0, the machinery's doing); the gate says how long."""
    sim = Simulation(init=0.01, run=0.4, postrun=0.01, success=1.0)

    async def body(svc: RolloutService, node: SimulatedNode) -> tuple[dict[str, Any], float]:
        svc.submit(task("t", 2, timeout_seconds=0.8))
        await asyncio.sleep(0.1)
        await svc.pause("drain")
        await asyncio.sleep(1.0)
        await svc.resume()
        return await svc.wait("t", 30), node.gate.credited_clock()

    result, _ = run(tmp_path, body, sim=sim)
    assert [s["status"] for s in result["sessions"]] == ["completed", "completed"], result["sessions"]
    assert all(s["reward"] == 1.0 for s in result["sessions"])


def test_the_gate_counts_the_seconds_it_was_closed() -> None:
    import time

    from polar_cli.gateway.pause import ModelCallGate

    async def main() -> tuple[float, float, float]:
        gate = ModelCallGate()
        before = gate.credited_clock()
        await gate.pause("drain")
        await asyncio.sleep(0.3)
        during = gate.paused_seconds()
        gate.resume()
        await asyncio.sleep(0.1)
        return during, gate.paused_seconds(), gate.credited_clock() - before

    t0 = time.monotonic()
    during, after, credited = asyncio.run(main())
    real = time.monotonic() - t0
    assert 0.25 < during <= after < 0.4
    assert credited < real - 0.25  # the credited clock stood still while the gate was closed

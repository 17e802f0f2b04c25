"""The rollout service on a simulated node (sleeps, seeded rewards; `serve.simulated`): groups come back whole, in
priority order, durable across a restart of the service on the same journal; cancel, early stop, retries and the
training-safety rules. What the simulation cannot show (containers, harnesses, tokens) is the integration tier's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from polar_cli.node.pools import PoolLimits
from polar_cli.serve.config import parse_serve_config
from polar_cli.serve.journal import Journal
from polar_cli.serve.models import TaskRequest
from polar_cli.serve.service import Conflict, RolloutService
from polar_cli.serve.simulated import SimulatedNode, Simulation
from polar_cli.serve.tasks import TaskError

X = TypeVar("X")
LIMITS = PoolLimits(init=2, run=2, postrun=2, ready=2)


def config(tmp: Path, **service: Any) -> Any:
    return parse_serve_config(
        {
            "harnesses": ["pi", "codex"],
            "engine": {"kind": "gold", "tokenizer": "qwen3"},
            "service": {"state_dir": str(tmp / "state"), **service},
        }
    )


def task(task_id: str, n: int = 4, **fields: Any) -> TaskRequest:
    body = {"task_id": task_id, "instruction": "fix it", "runtime": {"image": "img"}, "num_samples": n}
    body.setdefault("harness", "pi")
    return TaskRequest.model_validate({**body, **fields})


def run(
    tmp: Path,
    body: Callable[[RolloutService, SimulatedNode], Awaitable[X]],
    *,
    sim: Simulation | None = None,
    limits: PoolLimits = LIMITS,
    **service: Any,
) -> X:
    async def main() -> X:
        cfg = config(tmp, **service)
        node = SimulatedNode(limits, sim or Simulation(init=0.01, run=0.02, postrun=0.01))
        svc = RolloutService(cfg, Journal(tmp / "state"), node)
        await svc.start()
        try:
            return await body(svc, node)
        finally:
            await svc.stop()

    return asyncio.run(main())


def test_a_group_comes_back_whole_with_one_result_per_sample(tmp_path: Path) -> None:
    async def body(svc: RolloutService, node: SimulatedNode) -> dict[str, Any]:
        created, _ = svc.submit(task("t1", 6, sampling={"seed_base": 100}))
        assert created
        return await svc.wait("t1", 30)

    result = run(tmp_path, body)
    assert result["done"] and result["state"] == "completed"
    assert [s["index"] for s in result["sessions"]] == list(range(6))
    assert [s["seed"] for s in result["sessions"]] == [100, 101, 102, 103, 104, 105]
    assert result["counts"]["completed"] == 6
    rewards = [s["reward"] for s in result["sessions"]]
    assert set(rewards) <= {0.0, 1.0} and result["mean_reward"] == pytest.approx(sum(rewards) / 6)


def test_resubmitting_the_same_body_is_idempotent_and_another_body_conflicts(tmp_path: Path) -> None:
    async def body(svc: RolloutService, node: SimulatedNode) -> None:
        assert svc.submit(task("t1", 2))[0] is True
        assert svc.submit(task("t1", 2))[0] is False
        with pytest.raises(Conflict):
            svc.submit(task("t1", 3))
        await svc.wait("t1", 30)
        assert svc.submit(task("t1", 2))[0] is False  # also once done

    run(tmp_path, body)


def test_a_task_the_service_cannot_run_names_the_field(tmp_path: Path) -> None:
    async def body(svc: RolloutService, node: SimulatedNode) -> None:
        with pytest.raises(TaskError) as exc:
            svc.submit(task("t1", harness="claude-code"))
        assert exc.value.field == "harness"
        with pytest.raises(TaskError) as exc:
            svc.submit(
                task("t2", instruction=None, instance={"manifest": str(tmp_path / "no.jsonl"), "instance_id": "x"})
            )
        assert exc.value.field == "instance.manifest"
        assert svc.tasks == {}

    run(tmp_path, body)


def test_higher_priority_runs_first(tmp_path: Path) -> None:
    async def body(svc: RolloutService, node: SimulatedNode) -> list[str]:
        svc.submit(task("low", 3))
        svc.submit(task("high", 3, priority=5))
        await svc.wait("low", 30)
        await svc.wait("high", 30)
        assert node.last is not None
        return node.last.started

    # one session between INIT and the end of RUN at a time: low#0 may have been taken before "high" came
    started = run(tmp_path, body, limits=PoolLimits(init=1, run=1, postrun=1, ready=0))
    rest = started[1:] if started[0] == "low#0" else started
    assert [k.split("#")[0] for k in rest] == ["high"] * 3 + ["low"] * (len(rest) - 3)


def test_machinery_errors_are_retried_then_returned_fully_masked(tmp_path: Path) -> None:
    sim = Simulation(init=0.01, run=0.01, postrun=0.01, errors={"flaky": 1, "broken": 99})

    async def body(svc: RolloutService, node: SimulatedNode) -> tuple[dict[str, Any], dict[str, Any]]:
        svc.submit(task("flaky", 2))
        svc.submit(task("broken", 2))
        return await svc.wait("flaky", 30), await svc.wait("broken", 30)

    flaky, broken = run(tmp_path, body, sim=sim, session_retries=2)
    assert flaky["counts"]["completed"] == 2 and all(s["attempts"] == 2 for s in flaky["sessions"])
    assert broken["counts"]["error"] == 2
    for s in broken["sessions"]:
        assert s["attempts"] == 3 and s["masked"] and s["reward"] is None and s["masked_reason"] == "error"
        assert s["traces"] and all(set(t["loss_mask"]) == {0} for t in s["traces"])
    assert broken["usable"] == 0 and broken["mean_reward"] is None


def test_a_timeout_stays_trainable_with_reward_zero(tmp_path: Path) -> None:
    sim = Simulation(init=0.01, run=0.01, postrun=0.01, timeouts={"slow"})

    async def body(svc: RolloutService, node: SimulatedNode) -> dict[str, Any]:
        svc.submit(task("slow", 2, timeout_seconds=0.2))
        return await svc.wait("slow", 60)

    result = run(tmp_path, body, sim=sim)
    for s in result["sessions"]:
        assert s["status"] == "timeout" and s["reward"] == 0.0 and not s["masked"]
        assert all(1 in t["loss_mask"] for t in s["traces"])
    assert result["usable"] == 2


def test_early_stop_cuts_the_rest_into_masked_placeholders_and_keeps_the_group_size(tmp_path: Path) -> None:
    async def body(svc: RolloutService, node: SimulatedNode) -> dict[str, Any]:
        svc.submit(task("es", 8, early_stop_min_usable_sessions=2))
        return await svc.wait("es", 30)

    result = run(tmp_path, body, limits=PoolLimits(init=1, run=1, postrun=1, ready=0))
    sessions = result["sessions"]
    assert len(sessions) == 8 and result["state"] == "completed"
    real = [s for s in sessions if not s["placeholder"]]
    placeholders = [s for s in sessions if s["placeholder"]]
    assert len(real) >= 2 and len(placeholders) >= 4
    for s in placeholders:
        assert s["status"] == "cancelled" and s["masked"] and s["traces"] == [] and s["reward"] is None
        assert s["reason"].startswith("cancelled: early stop")


def test_cancel_ends_queued_and_running_samples_and_the_task(tmp_path: Path) -> None:
    sim = Simulation(init=0.01, run=0.5, postrun=0.01)

    async def body(svc: RolloutService, node: SimulatedNode) -> dict[str, Any]:
        svc.submit(task("c", 6))
        await asyncio.sleep(0.1)
        svc.cancel("c")
        return await svc.wait("c", 30)

    result = run(tmp_path, body, sim=sim)
    assert result["state"] == "cancelled" and result["done"]
    assert result["counts"]["cancelled"] == 6
    assert all(s["masked"] for s in result["sessions"])


def test_a_restart_on_the_same_journal_serves_finished_results_and_runs_the_rest(tmp_path: Path) -> None:
    sim = Simulation(init=0.01, run=0.2, postrun=0.01)

    async def first(svc: RolloutService, node: SimulatedNode) -> dict[str, Any]:
        svc.submit(task("done", 2))
        done = await svc.wait("done", 30)
        svc.submit(task("open", 6))
        await asyncio.sleep(0.3)  # some of "open" finish, the service then stops (as a crash would, mid-task)
        assert 0 < len(svc.tasks["open"].results) < 6
        return done

    before = run(tmp_path, first, sim=sim, limits=PoolLimits(init=1, run=1, postrun=1, ready=0))

    async def second(svc: RolloutService, node: SimulatedNode) -> tuple[dict[str, Any], dict[str, Any]]:
        return svc.result("done"), await svc.wait("open", 30)

    done_again, opened = run(tmp_path, second, sim=sim)
    assert done_again["sessions"] == before["sessions"]
    assert opened["done"] and [s["index"] for s in opened["sessions"]] == list(range(6))


def test_weight_versions_are_stamped_and_survive_a_restart(tmp_path: Path) -> None:
    async def body(svc: RolloutService, node: SimulatedNode) -> dict[str, Any]:
        await svc.set_weights("step-7")
        svc.submit(task("w", 2))
        return await svc.wait("w", 30)

    result = run(tmp_path, body)
    assert all(s["weight_versions"] == ["step-7"] for s in result["sessions"])

    async def again(svc: RolloutService, node: SimulatedNode) -> str | None:
        return node.gate.weight_version

    assert run(tmp_path, again) == "step-7"


def test_a_pause_holds_sessions_until_resume(tmp_path: Path) -> None:
    async def body(svc: RolloutService, node: SimulatedNode) -> None:
        await svc.pause("drain")
        svc.submit(task("p", 2))
        await asyncio.sleep(0.3)
        assert svc.tasks["p"].results == {}
        await svc.resume()
        assert (await svc.wait("p", 30))["done"]

    run(tmp_path, body)


def test_new_work_is_refused_while_paused_when_so_configured(tmp_path: Path) -> None:
    from polar_cli.serve.service import Paused

    async def body(svc: RolloutService, node: SimulatedNode) -> None:
        await svc.pause("abort")
        with pytest.raises(Paused):
            svc.submit(task("p", 1))
        await svc.resume()
        svc.submit(task("p", 1))

    run(tmp_path, body, refuse_while_paused=True)


def test_the_shipped_serve_configs_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from polar_cli.errors import ConfigError
    from polar_cli.serve.config import load_serve_config

    recipes = Path(__file__).resolve().parents[3] / "recipes"
    demo = load_serve_config(recipes / "serve-demo.yaml")
    assert demo.engine.kind == "gold" and list(demo.adapters()) == ["pi"]
    demo.check_exposure()
    gpu = load_serve_config(recipes / "serve-sglang.yaml", ["concurrency.run=8"])
    assert gpu.engine.sglang is not None and gpu.concurrency.run == 8 and gpu.service.host == "0.0.0.0"
    monkeypatch.delenv("POLAR_SERVE_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="auth_token"):
        gpu.check_exposure()
    monkeypatch.setenv("POLAR_SERVE_TOKEN", "secret")
    gpu.check_exposure()
    with pytest.raises(ConfigError, match=r"unknown key service\.prot"):
        load_serve_config(recipes / "serve-demo.yaml", ["service.prot=1"])

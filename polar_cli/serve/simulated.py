"""A simulated node: sessions as sleeps, rewards from a seeded coin, no Docker, no model. For the service's tests and
`scripts/bench_serve.py`, and for wiring a trainer to the service's API before a GPU box is at hand.

What it cannot show: anything about harnesses, containers, the gateway or tokens. Its traces are a few made-up ids
with the right shape (mask and logprobs line up), its model-call gate only counts pauses.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from polar_cli.node.pools import Job, PoolLimits, RunEnd, Timings
from polar_cli.serve.results import SessionOutput
from polar_cli.serve.stages import SessionJob


@dataclass
class Simulation:
    init: float = 0.05
    run: float = 0.1
    postrun: float = 0.05
    # chance that a session resolves its task (reward 1.0), drawn from (task_id, index): the same every time
    success: float = 0.5
    # sample indices of these tasks end as machinery errors on their first attempts (how many attempts fail)
    errors: dict[str, int] = field(default_factory=dict)
    # tasks whose sessions run past their timeout
    timeouts: set[str] = field(default_factory=set)


class SimulatedGate:
    def __init__(self) -> None:
        self.paused: str | None = None
        self.weight_version: str | None = None
        self.pauses = 0
        self._open = asyncio.Event()
        self._open.set()
        self._paused_total, self._paused_since = 0.0, 0.0

    async def pause(self, mode: Any, timeout: float | None = None) -> int:
        if self.paused is None:
            self._paused_since = time.monotonic()
        self.paused, self.pauses = str(mode), self.pauses + 1
        self._open.clear()
        return 0

    def resume(self) -> None:
        if self.paused is not None:
            self._paused_total += time.monotonic() - self._paused_since
        self.paused = None
        self._open.set()

    def credited_clock(self) -> float:
        """As the real gate's: `time.monotonic` stopped while paused."""
        now = time.monotonic()
        return now - self._paused_total - (now - self._paused_since if self.paused is not None else 0.0)

    async def wait_open(self) -> None:
        await self._open.wait()

    def set_weight_version(self, version: str | None) -> None:
        self.weight_version = version

    def status(self) -> dict[str, Any]:
        return {"paused": self.paused is not None, "mode": self.paused, "weight_version": self.weight_version}


class SimulatedStages:
    def __init__(self, sim: Simulation, gate: SimulatedGate, cancelled: Any) -> None:
        self.sim = sim
        self.gate = gate
        self.cancelled = cancelled
        self.started: list[str] = []  # job keys in the order INIT took them
        self.failures: dict[str, int] = {}
        self.run_versions: dict[str, str | None] = {}  # the weight version when each session's run began
        self.clock: Callable[[], float] = time.monotonic  # the pools' deadline clock, once attached

    async def init(self, job: Job[SessionJob], deadline: float) -> str:
        self.started.append(job.key)
        await asyncio.sleep(self.sim.init)
        return job.key

    async def run(self, job: Job[SessionJob], session: str, deadline: float) -> str:
        await self.gate.wait_open()
        self.run_versions[job.key] = self.gate.weight_version
        clock = self.clock
        if job.payload.task_id in self.sim.timeouts:  # the harness is killed at its deadline, as a real one is
            while clock() < deadline:
                await asyncio.sleep(min(0.05, max(0.0, deadline - clock())))
            return "timeout"
        # half the work, a model call (held while the gate is closed), the other half; past the deadline: killed
        await asyncio.sleep(self.sim.run / 2)
        await self.gate.wait_open()
        await asyncio.sleep(self.sim.run / 2)
        return "timeout" if clock() > deadline else "ok"

    async def postrun(self, job: Job[SessionJob], session: str | None, end: RunEnd, timings: Timings) -> SessionOutput:
        await asyncio.sleep(self.sim.postrun)
        sj = job.payload
        session_id = f"{sj.task_id}.{sj.index}.{sj.attempt}.sim"
        # a sample saw the version its run began under and the one current at its end (a sync may fall between)
        seen = (self.run_versions.pop(job.key, None), self.gate.weight_version)
        weights = list(dict.fromkeys(v for v in seen if v))
        if self.cancelled(sj) is not None:
            return SessionOutput(session_id, "cancelled", reason=f"cancelled: {self.cancelled(sj)}")
        if end.reason == "timeout" or end.value == "timeout":
            return SessionOutput(
                session_id,
                "timeout",
                reason=f"timeout: {end.error}",
                traces=[_trace(sj, 3, weights)],
                reported_reward=None,
                timings=timings.to_dict(),
                weight_versions=weights,
            )
        failing = self.sim.errors.get(sj.task_id, 0)
        if end.reason != "ok" or sj.attempt <= failing:
            return SessionOutput(
                session_id,
                "error",
                reason=f"run_error: {end.error or 'simulated fault'}",
                traces=[_trace(sj, 2, weights)],
                timings=timings.to_dict(),
            )
        reward = 1.0 if random.Random(f"{sj.task_id}#{sj.index}").random() < self.sim.success else 0.0
        return SessionOutput(
            session_id,
            "completed",
            reported_reward=reward,
            report={"type": "simulated", "resolved": reward == 1.0},
            traces=[_trace(sj, 4, weights)],
            timings=timings.to_dict(),
            weight_versions=weights,
        )

    async def discard(self, job: Job[SessionJob], session: str) -> None:
        return None


def _trace(sj: SessionJob, n: int, weights: list[str]) -> dict[str, Any]:
    return {
        "session_id": f"{sj.task_id}.{sj.index}",
        "seqs": [0],
        "messages": [{"role": "user", "content": sj.plan.instruction}, {"role": "assistant", "content": "done"}],
        "tools": "[]",
        "prompt_ids": [1, 2, 3],
        "response_ids": list(range(10, 10 + n)),
        "loss_mask": [1] * n,
        "response_logprobs": [-0.5] * n,
        "finish_reason": "stop",
        "metadata": {},
        "weight_versions": weights,
    }


class SimulatedNode:
    def __init__(self, limits: PoolLimits, sim: Simulation | None = None, node_id: str = "simulated") -> None:
        self.node_id = node_id
        self.limits = limits
        self.sim = sim or Simulation()
        self._gate = SimulatedGate()
        self.last: SimulatedStages | None = None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def stages(self, cancelled: Any) -> SimulatedStages:
        self.last = SimulatedStages(self.sim, self._gate, cancelled)
        return self.last

    @property
    def gate(self) -> SimulatedGate:
        return self._gate

    def attach(self, pools: Any) -> None:
        if self.last is not None:  # the deadlines the stages are handed run on the pools' clock
            self.last.clock = pools.deadline_clock

    def job_timeout(self, session_timeout: float) -> float:
        return session_timeout

    def deadline_clock(self) -> float:
        return self._gate.credited_clock()

    def info(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "engine": "simulated"}

    def engines(self) -> list[dict[str, Any]]:
        url, version = "sim://engine-0", self._gate.weight_version
        return [
            {"node_id": self.node_id, "url": url, "kind": "simulated", "weight_version": version, "in_rotation": True}
        ]

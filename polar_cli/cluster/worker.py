"""One gateway node as a Ray actor runs it: the node of today (engine, gateway, Docker runtime, stage pools) fed one
session at a time by the driver, each call answered with the session's result.

`NodeWorker` knows nothing of Ray (`actor.py` wraps it): `start` opens what the node needs, `run(key, payload,
timeout)` puts one session into the node's own pools and returns its result when POSTRUN is done, `cancel` ends
chosen sessions through POSTRUN. What a session is depends on the kind of work:

    generate   payload `generate.stages.SessionPlan`; result (kind, row): the row `generate.rows.build_row` makes,
               with ``node_id`` and ``capture_path`` (this node's disk), or the capture file itself with
               ``output.collect_capture``
    serve      payload `serve.stages.SessionJob`; result `serve.results.SessionOutput`
    simulated  sleeps (`serve.simulated`), for tests and `scripts/bench_cluster.py`

The worker holds no global state: the driver owns the queue, the run directory or the journal, and retries. A node
prepares its own bundles and images (every machine has its own Docker), and sweeps containers its dead predecessors
left at start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from polar_cli.node.feed import Feed
from polar_cli.node.pools import Job, PoolLimits, StagePools, Timings

log = logging.getLogger("polar.cluster")
Kind = Literal["generate", "serve", "simulated"]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What a node actor is told at start."""

    kind: Kind
    # a Recipe (generate), a ServeConfig (serve) or a Simulation (simulated)
    config: Any
    node_dir: str
    limits: PoolLimits
    collect_capture: bool = False


class JobFeed(Feed[Any]):
    """A FIFO of jobs the node's pools pull from."""

    def __init__(self) -> None:
        self._jobs: deque[Job[Any]] = deque()

    def push(self, job: Job[Any]) -> None:
        self._jobs.append(job)

    def drop(self, keys: set[str]) -> list[str]:
        """Take the jobs of ``keys`` out; returns the keys taken."""
        taken = [j.key for j in self._jobs if j.key in keys]
        self._jobs = deque(j for j in self._jobs if j.key not in keys)
        return taken

    def __len__(self) -> int:
        return len(self._jobs)

    def _pop(self) -> Job[Any]:
        return self._jobs.popleft()


@dataclass
class _Parts:
    runtime: Any = None
    engine: Any = None
    gateway: Any = None
    pools: list[ThreadPoolExecutor] = field(default_factory=list)


class NodeWorker:
    def __init__(self, spec: NodeSpec, node_id: str | None = None) -> None:
        self.spec = spec
        self.node_id = node_id or f"{socket.gethostname()}:{os.getpid()}"
        self.dir = Path(spec.node_dir)
        self.feed = JobFeed()
        self.futures: dict[str, asyncio.Future[Any]] = {}
        # serve: keys the driver cancelled, and why (ServeStages asks, to skip grading)
        self.cancelled: dict[str, str] = {}
        self.retired: dict[str, str] = {}  # engine URL -> why a weight load took it out of rotation
        self.parts = _Parts()
        self.pools: StagePools[Any, Any, Any] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._closing = False
        self.done = 0
        # seconds each of the last sessions spent on this node, from the driver's call to its result (bench_cluster
        # subtracts it from the driver's own wall time: what remains is Ray and the driver)
        self.walls: dict[str, float] = {}

    # ---- life ----------------------------------------------------------------------------------------------------

    async def start(self) -> dict[str, Any]:
        for sub in ("capture", "logs", "artifacts"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        # who ran here: the process that owns this node's containers (their polar.owner label), for operators
        (self.dir / "node.json").write_text(
            json.dumps({"node_id": self.node_id, "host": socket.gethostname(), "pid": os.getpid()})
        )
        stages = await self._stages()
        self.pools = StagePools(
            stages,
            self.spec.limits,
            self._on_result,
            hold=lambda: not self._closing,
            failed=self._failed_result(stages),
        )
        self._runner = asyncio.get_running_loop().create_task(self.pools.run(self.feed))
        return self.info()

    async def _stages(self) -> Any:
        if self.spec.kind == "simulated":
            from polar_cli.serve.simulated import SimulatedGate, SimulatedStages

            self.parts.gateway = SimulatedGate()
            return SimulatedStages(self.spec.config, self.parts.gateway, lambda sj: self.cancelled.get(sj.key))
        from polar_cli.inference.engines import open_engine
        from polar_cli.node.gateway import NodeGateway
        from polar_cli.node.session_steps import SessionSteps, in_thread, runtime_threads
        from polar_cli.runtime.docker import DockerRuntime

        config = self.spec.config
        c = self.spec.limits
        docker_pool = ThreadPoolExecutor(runtime_threads(c.init, c.run, c.postrun), thread_name_prefix="polar-node")
        engine_pool = ThreadPoolExecutor(2, thread_name_prefix="polar-engine")
        self.parts.pools = [docker_pool, engine_pool]
        runtime = self.parts.runtime = await in_thread(docker_pool, DockerRuntime)
        swept = await in_thread(docker_pool, runtime.sweep)
        if swept:
            log.info("node %s: removed %d container(s) left behind by a dead process", self.node_id, swept)
        engine = self.parts.engine = await open_engine(config.engine, self.dir, executor=engine_pool)
        rt = config.runtime
        gateway = NodeGateway(engine, self.dir / "capture", host=rt.gateway_host, url=rt.gateway_url)
        self.parts.gateway = gateway
        await gateway.start()
        steps = SessionSteps(runtime, docker_pool)
        if self.spec.kind == "generate":
            from polar_cli.cluster.node_stages import NodeGenerateStages

            eot = config.builder.eot_token_id if config.builder.eot_token_id is not None else engine.eot_token_id
            return NodeGenerateStages(config, steps, gateway, self.dir, eot)
        from polar_cli.serve.stages import ServeStages

        return ServeStages(
            steps=steps,
            gateway=gateway,
            state_dir=self.dir,
            eval_settings=config.eval,
            eval_timeout=config.timeouts.eval,
            build_images=config.runtime.build_images,
            name=config.name,
            eot_token_id=config.builder.eot_token_id
            if config.builder.eot_token_id is not None
            else engine.eot_token_id,
            cancelled=lambda sj: self.cancelled.get(sj.key),
        )

    async def stop(self) -> None:
        self._closing = True
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
        try:
            if self.spec.kind != "simulated" and self.parts.gateway is not None:
                await self.parts.gateway.stop()
        finally:
            try:
                if self.parts.engine is not None:
                    await self.parts.engine.close()
            finally:
                if self.parts.runtime is not None:
                    self.parts.runtime.close()
                for pool in self.parts.pools:
                    pool.shutdown(wait=False, cancel_futures=True)

    # ---- sessions --------------------------------------------------------------------------------------------------

    async def run(self, key: str, payload: Any, timeout: float) -> Any:
        """Run one session through this node's pools; returns its result. Cancelled: the session ends via POSTRUN."""
        assert self.pools is not None, "start the node first"
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self.futures[key] = future
        self.feed.push(Job(key, payload, timeout))
        self.pools.feed()
        start = loop.time()
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self.cancel([key], "cancelled by the driver")
            raise
        finally:
            if len(self.walls) >= 10_000:
                self.walls.pop(next(iter(self.walls)))
            self.walls[key] = loop.time() - start

    def cancel(self, keys: list[str], reason: str) -> int:
        wanted = set(keys)
        for key in wanted:
            self.cancelled[key] = reason
        dropped = self.feed.drop(wanted)
        for key in dropped:  # never started: nothing to collect
            future = self.futures.pop(key, None)
            if future is not None and not future.done():
                future.cancel()
        if self.pools is None:
            return len(dropped)
        return len(dropped) + self.pools.cancel(lambda job: job.key in wanted, reason)

    def _failed_result(self, stages: Any) -> Any:
        """What a session whose POSTRUN raised gets (`node.pools` Rule 5), as on one box: generate's
        ``postrun_error`` facts, serve's error output; never a future the driver waits on for good."""
        from polar_cli.serve.held import failed_output

        if self.spec.kind != "generate":
            return failed_output
        return stages.failed

    def _on_result(self, job: Job[Any], result: Any, timings: Timings) -> None:
        self.done += 1
        self.cancelled.pop(job.key, None)
        future = self.futures.pop(job.key, None)
        if future is None or future.done():
            return
        try:
            future.set_result(self._finish(job, result, timings))
        except Exception as exc:  # a result that cannot be made into a row is the node's fault: the driver retries
            future.set_exception(exc)

    def _finish(self, job: Job[Any], result: Any, timings: Timings) -> Any:
        if self.spec.kind != "generate":
            return result
        from polar_cli.capture.store import session_file
        from polar_cli.generate.rows import build_row

        timing = timings.to_dict()
        timing["total"] = round(sum(timing.values()), 3)
        kind, row = build_row(result, timing)
        row["node_id"] = self.node_id
        capture = session_file(self.dir / "capture", result.session_id) if result.session_id else None
        row["capture_path"] = str(capture) if capture is not None else None
        if self.spec.collect_capture and capture is not None and capture.exists():
            row["_capture_bytes"] = capture.read_bytes()
        return kind, row

    # ---- the gateway's gate (serve: weight syncs) ----------------------------------------------------------------

    async def pause(self, mode: str) -> int:
        gate = self._gate()
        return int(await gate.pause(mode)) if gate is not None else 0

    def resume(self) -> None:
        gate = self._gate()
        if gate is not None:
            gate.resume()

    def set_weight_version(self, version: str | None) -> None:
        gate = self._gate()
        if gate is not None:
            gate.set_weight_version(version)

    def gate_status(self) -> dict[str, Any] | None:
        gate = self._gate()
        return gate.status() if gate is not None else None

    # ---- the engines it drives (serve: weight syncs, `serve.weights.load_targets`) --------------------------------

    def engines(self) -> list[dict[str, Any]]:
        """Each engine server this node drives: URL, kind, model, the version stamped on its calls, in rotation."""
        from polar_cli.inference.control import engine_urls

        engine = self.parts.engine
        if self.spec.kind != "serve" or engine is None:
            return []
        gate = self._gate()
        version = gate.weight_version if gate is not None else None
        return [
            {"node_id": self.node_id, "url": url, "kind": self.spec.config.engine.kind, "model": engine.model}
            | {"weight_version": version, "in_rotation": url not in self.retired, "retired": self.retired.get(url)}
            for url in engine_urls(engine)
        ]

    async def load_weights(self, request: Any, urls: list[str] | None = None) -> list[dict[str, Any]]:
        """Load a `WeightsRequest`'s checkpoint into the engines of ``urls`` (None: every one in rotation) and check
        each; one that fails leaves this node's rotation. The driver has paused the gate and stamps the version."""
        from polar_cli.inference.servers import server_control
        from polar_cli.serve.weights import WeightTargets, load_targets

        engine = self.parts.engine
        if engine is None:
            return []
        mine = [e["url"] for e in self.engines() if e["in_rotation"] and (urls is None or e["url"] in urls)]
        c = self.spec.config.engine
        targets = WeightTargets(server_control(c.kind, c.dialect), engine.model, mine, self.retire_engine)
        return [{"node": self.node_id} | row for row in await load_targets(targets, request)]

    def retire_engine(self, url: str, reason: str) -> None:
        """Out of this node's rotation (a weight load failed on it, here or on another node driving it too)."""
        self.retired[url] = reason
        pool = getattr(self.parts.engine, "pool", None)
        if pool is not None:
            pool.retire(url, reason)

    def retire_engines(self, reasons: dict[str, str]) -> list[dict[str, Any]]:
        """`retire_engine` for those of ``reasons`` this node drives; its engine rows after."""
        for row in self.engines():
            if row["url"] in reasons and row["in_rotation"]:
                self.retire_engine(row["url"], reasons[row["url"]])
        return self.engines()

    def _gate(self) -> Any:
        gateway = self.parts.gateway
        if gateway is None:
            return None
        return gateway if self.spec.kind == "simulated" else gateway.gate

    def info(self) -> dict[str, Any]:
        snap = self.pools.snapshot() if self.pools is not None else None
        return {
            "node_id": self.node_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "kind": self.spec.kind,
            "node_dir": str(self.dir),
            "capacity": capacity(self.spec.limits),
            "in_flight": len(self.futures),
            "done": self.done,
            "running": snap.running if snap else 0,
            "gateway": getattr(self.parts.gateway, "url", None),
            "model": getattr(self.parts.engine, "model", None),
            "engines": self.engines(),
        }

    def sweep(self) -> int:
        """Remove containers of dead owners on this node's machine (a node that died next to this one)."""
        runtime = self.parts.runtime
        return int(runtime.sweep()) if runtime is not None else 0


def capacity(limits: PoolLimits) -> int:
    """Sessions a node holds at once: its RUN slots, its READY buffer and its POSTRUN workers (a session being graded
    still occupies the node), so RUN never waits on the driver."""
    return limits.run + limits.ready + limits.postrun

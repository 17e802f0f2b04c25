"""One `polar generate` run segment: recipe in, rows out, resumable at any point.

    manifest -> selection -> (instance, harness, attempt) keys, minus the ones the run directory has finished
    images (harness bundles, instance images) -> engine (probed) -> gateway -> stage pools -> rows -> summary

Everything that can be checked before a container starts is checked first (recipe, manifest, images, engine), so a
bad recipe costs seconds, not a GPU box. Ctrl-C or SIGTERM cancel the pools: every container is removed, every row
already written stays, and the same command resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from polar_cli.config import Recipe
from polar_cli.corpus.writer import finalize_parquet
from polar_cli.dirlock import directory_lock
from polar_cli.errors import ConfigError, DiskFull, PolarError
from polar_cli.generate.progress import Progress
from polar_cli.generate.rows import SessionFacts, build_row
from polar_cli.generate.stages import GenerateStages, SessionPlan, plan_sessions
from polar_cli.generate.state import CORPUS, RunState, Verdict
from polar_cli.generate.summary import summarize, write_summary
from polar_cli.generate.watches import Requeue, detection_window, docker_watch, engine_watch
from polar_cli.inference.engines import EngineHandle, open_engine
from polar_cli.metrics.generate import Hooks, attach_hooks
from polar_cli.node.gateway import NodeGateway
from polar_cli.node.health import DependencyLost, Outages, Watch
from polar_cli.node.pools import Job, PoolLimits, StagePools, Timings
from polar_cli.node.session_steps import SessionSteps, runtime_threads
from polar_cli.runtime.base import Runtime
from polar_cli.swe.manifest import Instance
from polar_cli.tasks.select import prepare_images, select_tasks

log = logging.getLogger("polar.generate")


class PreflightFailed(PolarError):
    """A check that must pass before a run starts failed (Docker, images, the engine URL, free disk)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    summary: dict[str, Any]
    interrupted: bool


def check_preflight(recipe: Recipe, out: Path, instances: list[Instance], runtime: Runtime) -> None:
    """`polar doctor`'s checks that must stop a run, before anything starts: each failing one is logged, the first
    is the error the command exits 1 with."""
    from polar_cli.doctor import preflight
    from polar_cli.doctor.report import line

    failing = preflight(recipe, out, instances=instances, has_image=runtime.image_exists)
    for check in failing:
        log.error("preflight: %s", line(check))
    if failing:
        raise PreflightFailed(f"{line(failing[0])} (polar doctor shows every check)")


def previous_model(out: Path, recipe: Recipe) -> str:
    """The model name to report when this segment never opens the engine (nothing left to run)."""
    import orjson

    if recipe.engine.model:
        return recipe.engine.model
    if recipe.engine.kind in ("gold", "noop"):
        return f"polar-{recipe.engine.kind}"
    try:
        return str(orjson.loads((out / "summary.json").read_bytes()).get("model") or "")
    except (OSError, orjson.JSONDecodeError):
        return ""


@contextlib.contextmanager
def run_logging(out: Path, verbose: bool) -> Iterator[None]:
    """logs/generate.log always; stderr at INFO for cron (no live view), else warnings only."""
    root = logging.getLogger("polar")
    file_handler = logging.FileHandler(out / "logs" / "generate.log")
    console = logging.StreamHandler(sys.stderr)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    file_handler.setFormatter(fmt)
    console.setFormatter(fmt)
    file_handler.setLevel(logging.INFO)
    console.setLevel(logging.INFO if verbose else logging.WARNING)
    previous = root.level
    root.setLevel(logging.INFO)
    root.addHandler(file_handler)
    root.addHandler(console)
    try:
        yield
    finally:
        root.removeHandler(file_handler)
        root.removeHandler(console)
        file_handler.close()
        root.setLevel(previous)


class Generation:
    """The rows side of a segment: each finished session is turned into its row and recorded (Rules 1-3); an error
    an outage caused is run again (`watches.Requeue`)."""

    def __init__(self, state: RunState, progress: Progress) -> None:
        self.state = state
        self.progress = progress
        self.requeue: Requeue | None = None
        self.pools: StagePools[SessionPlan, Any, SessionFacts] | None = None
        # told of each finished session after its rows are written (metrics, the live report: `metrics.generate`)
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = []

    def on_result(self, job: Job[SessionPlan], facts: SessionFacts, timings: Timings) -> None:
        timing = timings.to_dict()
        timing["total"] = round(sum(timing.values()), 3)
        kind, row = build_row(facts, timing)
        self.state.record(Verdict(kind, row))
        self.progress.session_done(kind, row)
        for listener in self.listeners:
            listener(kind, row)
        if self.requeue is None or self.pools is None:
            return
        if self.requeue.finished(job, kind):
            log.info("session %s: cut short by an outage (%s); it runs again", job.key, row["reason"])
            self.pools.requeue(job)
        elif kind == "error":  # an outage declared soon may explain it: look again when that could no longer be
            asyncio.get_running_loop().call_later(self.requeue.window + 0.1, self.pools.kick)


async def run_pools(
    recipe: Recipe,
    out: Path,
    plans: list[SessionPlan],
    runtime: Runtime,
    pools: tuple[ThreadPoolExecutor, ThreadPoolExecutor],
    generation: Generation,
    engine_info: dict[str, Any],
) -> None:
    """Engine up, gateway up, sessions through the pools; everything torn down in reverse order, also on cancel."""
    docker_pool, engine_pool = pools
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    engine = await open_engine(recipe.engine, out, executor=engine_pool)
    engine_info.update(kind=engine.kind, model=engine.model)
    try:
        generation.state.check_model(engine.model)
        gateway = NodeGateway(engine, out / "capture", host=recipe.runtime.gateway_host, url=recipe.runtime.gateway_url)
        await gateway.start()
        try:
            steps = SessionSteps(runtime, docker_pool)
            outages = Outages()
            requeue = Requeue(outages, recipe.runtime.outage_retries, detection_window(recipe))
            stages = GenerateStages(recipe, steps, gateway, out, engine.eot_token_id)
            stages.on_init = requeue.started_session
            c = recipe.concurrency
            node = StagePools(
                stages,
                PoolLimits(init=c.init, run=c.run, postrun=c.postrun, ready=c.ready),
                generation.on_result,
                on_change=generation.progress.update,
                gate=outages.open,
                hold=requeue.hold,
                fatal=(DiskFull,),
                failed=stages.failed,
            )
            outages.on_open = node.kick
            generation.requeue, generation.pools = requeue, node
            requeue.rerun = node.requeue
            engine_info["outages"] = outages.history
            watching = watches(engine, recipe, out, runtime, outages, node)
            if not watching:  # nothing watched (a scripted engine, a runtime without a ping): no outage can come
                requeue.window = 0.0
            await run_watched(node.run(Job(p.key, p, p.session_timeout(recipe)) for p in plans), watching)
        finally:
            await gateway.stop()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        await engine.close()


def watches(
    engine: EngineHandle,
    recipe: Recipe,
    out: Path,
    runtime: Runtime,
    outages: Outages,
    node: StagePools[SessionPlan, Any, SessionFacts],
) -> list[Watch]:
    found = [engine_watch(engine, recipe, out, outages, node), docker_watch(runtime, recipe, outages, node)]
    return [w for w in found if w is not None]


async def run_watched(work: Coroutine[Any, Any, None], watching: list[Watch]) -> None:
    """Run ``work`` while the watches run; a watch that gives up (`DependencyLost`) cancels the work and raises."""
    main = asyncio.ensure_future(work)
    guards = [asyncio.ensure_future(w.run()) for w in watching]
    try:
        while True:
            done, _ = await asyncio.wait([main, *guards], return_when=asyncio.FIRST_COMPLETED)
            if main in done:
                main.result()
                return
            for guard in done:
                guards.remove(guard)
                guard.result()  # DependencyLost (a watch only returns by raising)
    finally:
        for watch in watching:
            watch.stop()
        for task in (main, *guards):
            task.cancel()
        await asyncio.wait([main, *guards], timeout=30)


# runs the planned sessions on other machines instead of this one's pools (`cluster.generate.run_on_cluster`): handed
# in by the command, which stands above both, so that this run knows no cluster
Elsewhere = Callable[[Recipe, Path, list[SessionPlan], "Generation", dict[str, Any]], Coroutine[Any, Any, None]]


def generate(
    recipe: Recipe,
    out: Path,
    *,
    live: bool = True,
    runtime_factory: Callable[[], Runtime] | None = None,
    elsewhere: Elsewhere | None = None,
    refresher: Any = None,
) -> Outcome:
    """Run (or resume) ``recipe`` in ``out``; returns the summary. ConfigError / RuntimeFailure / UpstreamError
    escape before any session started; `DirectoryBusy` when another process runs in ``out`` (`dirlock`).

    ``elsewhere`` runs the sessions on a cluster (required when the recipe sets ``cluster.ray.address``);
    ``refresher`` is told of each finished session and closed at the end (`report.live.Refresher`)."""
    if recipe.cluster.enabled and elsewhere is None:
        raise ConfigError("cluster.ray.address is set, but no cluster runner was given (polar generate gives one)")
    with directory_lock(out, "run directory"):
        return _generate(recipe, out, live, runtime_factory, elsewhere, refresher)


def _generate(
    recipe: Recipe,
    out: Path,
    live: bool,
    runtime_factory: Callable[[], Runtime] | None,
    elsewhere: Elsewhere | None,
    refresher: Any,
) -> Outcome:
    state = RunState(out, recipe, fsync=recipe.output.fsync)
    interrupted = False
    lost: DependencyLost | DiskFull | None = None
    engine_info: dict[str, Any] = {"kind": recipe.engine.kind, "model": previous_model(out, recipe)}
    plans: list[SessionPlan] = []
    started = time.monotonic()
    hooks: Hooks | None = None
    with run_logging(out, verbose=not live):
        if state.recovered:
            log.info("recovered %d row(s) written just before the previous run was killed", state.recovered)
        runtime: Runtime | None = None
        c = recipe.concurrency
        docker_pool = ThreadPoolExecutor(runtime_threads(c.init, c.run, c.postrun), thread_name_prefix="polar-node")
        engine_pool = ThreadPoolExecutor(2, thread_name_prefix="polar-engine")
        try:
            instances, harbor = select_tasks(recipe)
            adapters = recipe.adapters()
            if elsewhere is not None and harbor:
                raise ConfigError("Harbor tasks run on one machine for now (cluster.ray.address is set)")
            if elsewhere is not None:
                # the driver needs no Docker: every node prepares its own images, bundles and engine
                from polar_cli.swe.images import instance_image

                template = recipe.manifest.image_template
                images = {i.instance_id: instance_image(i, template) for i in instances}
                bundles: dict[str, str | None] = {a.name: None for a in adapters}
            else:
                if runtime_factory is None:
                    from polar_cli.runtime.docker import DockerRuntime

                    runtime_factory = DockerRuntime
                runtime = runtime_factory()
                swept = runtime.sweep()
                if swept:
                    log.info("removed %d container(s) left behind by a dead run", swept)
                check_preflight(recipe, out, instances, runtime)
                bundles, images = prepare_images(recipe, instances, runtime, harbor)
            plans = plan_sessions(
                instances, adapters, recipe.attempts, lambda i: images[i.instance_id], bundles, harbor=harbor
            )
            todo = [p for p in plans if p.key not in state.finished]
            accepted_before = sum(bool(e["accepted"]) for e in state.finished.values())
            progress = Progress(len(plans), len(plans) - len(todo), accepted_before)
            log.info(
                "%d session(s) planned, %d finished before, %d to run", len(plans), len(plans) - len(todo), len(todo)
            )
            generation = Generation(state, progress)
            hooks = attach_hooks(recipe, progress, refresher)
            generation.listeners.append(hooks.on_result)
            if elsewhere is not None:
                work = partial(elsewhere, recipe, out, todo, generation, engine_info)
            else:
                assert runtime is not None
                pools = (docker_pool, engine_pool)
                work = partial(run_pools, recipe, out, todo, runtime, pools, generation, engine_info)
            if live and todo:
                from rich.live import Live

                with Live(progress, refresh_per_second=2, transient=False):
                    asyncio.run(work())
            elif todo:
                asyncio.run(work())
        except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, or SIGTERM (which cancels the main task)
            interrupted = True
            log.warning("interrupted: containers removed, rows so far kept; run the same command to resume")
        except (DependencyLost, DiskFull) as exc:  # a lost cluster too (`ClusterError`); the summary is still written
            lost = exc
            log.error("%s; rows so far kept, run the same command to resume", exc)
        finally:
            if runtime is not None:
                runtime.close()
            docker_pool.shutdown(wait=True, cancel_futures=True)
            engine_pool.shutdown(wait=True, cancel_futures=True)
            rows = state.corpus.rows
            state.close(interrupted=interrupted)
        if "parquet" in recipe.output.formats and rows and not isinstance(lost, DiskFull):
            finalize_parquet(out / CORPUS, out / "corpus.parquet")
        summary = summarize(
            out,
            gpus=recipe.engine.gpu_count(),
            planned=len(plans),
            engine=str(engine_info["kind"]),
            model=str(engine_info["model"]),
            segment=state.segment,
        )
        summary["segment_seconds"] = round(time.monotonic() - started, 1)
        summary["outages"] = engine_info.get("outages", [])
        if "cluster" in engine_info:
            summary["cluster"] = engine_info["cluster"]
        try:
            write_summary(out, summary)
        except OSError as exc:  # a full disk: the summary is derived from state.jsonl, the next run writes it
            log.error("writing summary.json failed: %s", exc)
        if hooks is not None:  # the last report (after the summary), the metrics port closed
            hooks.close()
    if lost is not None:
        raise lost
    return Outcome(summary, interrupted)

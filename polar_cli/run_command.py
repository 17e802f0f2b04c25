"""`polar run`: one ad-hoc session: an engine and the gateway in-process, one harness in one container, a JSON result.

The engine (a running SGLang/vLLM by `--upstream`, or the scripted gold/noop policy) and the node's gateway run on
their own event loop in a background thread; the session runs in the main thread, so Ctrl-C (and SIGTERM, turned
into the same) lands where the container is removed.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from polar_cli.errors import ConfigError, PolarError, UpstreamError

if TYPE_CHECKING:
    from polar_cli.config import EngineConfig
    from polar_cli.node.gateway import NodeGateway

DIALECTS = ("sglang", "sglang-legacy", "vllm")
SCRIPTED = ("gold", "noop")
START_TIMEOUT = 600.0  # a first tokenizer fetch or a slow server's probe


@dataclass(frozen=True, slots=True)
class Target:
    image: str
    instruction: str
    base_commit: str | None
    instance_id: str | None
    # the instance's reference patch, for the gold engine
    gold_patch: str | None = None


def engine_config(upstream: str | None, engine: str | None, model: str | None, tokenizer: str | None) -> EngineConfig:
    """The engine to answer the session: a running server (``--upstream``) or a scripted policy (``--engine``)."""
    from pydantic import ValidationError

    from polar_cli.config import EngineConfig

    try:
        if upstream is not None:
            if engine is not None and engine not in DIALECTS:
                raise ConfigError(f"--engine with --upstream names its token fields: one of {', '.join(DIALECTS)}")
            return EngineConfig(kind="server", url=upstream, dialect=engine or "sglang", model=model)  # type: ignore[arg-type]
        if engine in SCRIPTED:
            return EngineConfig(kind=engine, tokenizer=tokenizer or "qwen3", model=model)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(f"engine: {exc.errors()[0]['msg']}") from exc
    raise ConfigError(
        "give --upstream URL (a running SGLang/vLLM) or --engine gold|noop; launching SGLang takes a recipe "
        "(polar generate)"
    )


@dataclass
class LocalGateway:
    """The node's gateway, driven from the main thread."""

    node: NodeGateway
    loop: asyncio.AbstractEventLoop

    @property
    def url(self) -> str:
        return self.node.url

    def open_session(self, session_id: str, target: Target, workdir: str) -> str:
        from polar_cli.inference.gold import Task

        task = Task(target.instance_id or session_id, target.gold_patch or "", workdir)

        async def _open() -> str:
            return self.node.open_session(session_id, task)

        return asyncio.run_coroutine_threadsafe(_open(), self.loop).result(30)


@contextmanager
def local_gateway(config: EngineConfig, capture_dir: Path, run_dir: Path) -> Iterator[LocalGateway]:
    """Engine and gateway on a background event loop, listening on 127.0.0.1 and an ephemeral port."""
    from polar_cli.inference.engines import open_engine
    from polar_cli.node.gateway import NodeGateway

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="polar-gateway", daemon=True)
    thread.start()

    async def _start() -> NodeGateway:
        handle = await open_engine(config, run_dir)
        try:
            node = NodeGateway(handle, capture_dir)
            await node.start()
        except BaseException:
            await handle.close()
            raise
        return node

    async def _stop(node: NodeGateway) -> None:
        try:
            await node.stop()
        finally:
            await node.engine.close()

    def _shutdown(node: NodeGateway | None) -> None:
        # calls still in flight end first, while the capture writer can still record how they ended
        asyncio.run_coroutine_threadsafe(_cancel_pending(), loop).result(30)
        if node is not None:
            asyncio.run_coroutine_threadsafe(_stop(node), loop).result(60)
            asyncio.run_coroutine_threadsafe(_cancel_pending(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    try:
        node = asyncio.run_coroutine_threadsafe(_start(), loop).result(START_TIMEOUT)
    except BaseException as exc:
        _shutdown(None)
        if isinstance(exc, TimeoutError):
            raise UpstreamError(f"the engine was not ready within {START_TIMEOUT:g} s") from exc
        raise
    try:
        yield LocalGateway(node, loop)
    finally:
        _shutdown(node)


async def _cancel_pending() -> None:
    # tasks still running when the session ends early (Ctrl-C) must not die with the loop unfinished
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def resolve_target(
    image: str | None,
    instruction: str | None,
    instance: str | None,
    manifest: str | None,
    image_template: str | None,
) -> Target:
    """What to run: --image + --instruction, or --instance + --manifest (image, problem statement, base commit)."""
    if image and instruction is not None and not instance and not manifest:
        return Target(image, instruction, None, None)
    if instance and manifest and not image and instruction is None:
        from polar_cli.swe.images import instance_image
        from polar_cli.swe.manifest import load_manifest

        rows = [r for r in load_manifest(manifest) if r.instance_id == instance]
        if not rows:
            raise ConfigError(f"--instance {instance}: not in manifest {manifest}")
        row = rows[0]
        image_name = instance_image(row, image_template)
        return Target(image_name, row.problem_statement, row.base_commit, row.instance_id, row.patch)
    raise ConfigError("give either --image and --instruction, or --instance and --manifest")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up exactly like Ctrl-C


def run(
    harness: Annotated[str, typer.Option(help="claude-code | codex | qwen-code | gemini-cli | pi")],
    image: Annotated[str | None, typer.Option(help="Image to run in (the work happens in --workdir)")] = None,
    instruction: Annotated[str | None, typer.Option(help="The task, given to the harness verbatim")] = None,
    instance: Annotated[str | None, typer.Option(help="instance_id of a manifest row")] = None,
    manifest: Annotated[str | None, typer.Option(help="Manifest (.json/.jsonl/.parquet) holding --instance")] = None,
    image_template: Annotated[
        str | None, typer.Option(help="Instance image name template (swe-gym | swe-bench | format string)")
    ] = None,
    upstream: Annotated[str | None, typer.Option(help="A running SGLang or vLLM server (URL)")] = None,
    engine: Annotated[
        str | None,
        typer.Option(help="gold | noop (scripted, no server); with --upstream: sglang | sglang-legacy | vllm"),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Served model name (default: the server's first)")] = None,
    tokenizer: Annotated[str | None, typer.Option(help="gold/noop: tokenizer dir, or qwen3 (default)")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds for the whole session, from container start")] = 1800.0,
    out: Annotated[
        Path | None, typer.Option(help="Directory for capture and artifacts (default runs/<session>)")
    ] = None,
    workdir: Annotated[str, typer.Option(help="Working directory of the harness in the container")] = "/testbed",
    cpus: Annotated[float | None, typer.Option(help="CPU limit of the container")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="Memory limit of the container (MiB)")] = None,
) -> None:
    """Run one harness session in a container through a local gateway; prints a JSON result (exit 0 when ok)."""
    from polar_cli.harness import Wiring, get_adapter
    from polar_cli.harness.session import SessionSpec, run_session
    from polar_cli.runtime.base import RuntimeFailure
    from polar_cli.runtime.docker import DockerRuntime
    from polar_cli.runtime.images import ensure_bundle_container, ensure_harness_image

    previous_handler = signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()
    session_id = f"run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    try:
        adapter = get_adapter(harness)
        config = engine_config(upstream, engine, model, tokenizer)
        target = resolve_target(image, instruction, instance, manifest, image_template)
        if config.kind == "gold" and not target.gold_patch:
            raise ConfigError("--engine gold applies an instance's reference patch: give --instance and --manifest")
        out_dir = out or Path("runs") / session_id
        capture_dir = out_dir / "capture"
        with DockerRuntime() as runtime:
            runtime.sweep()
            prep_start = time.monotonic()
            bundle_image = ensure_harness_image(runtime.client, adapter.name, log=_stderr).image
            bundle = ensure_bundle_container(runtime.client, bundle_image)
            if not runtime.image_exists(target.image):
                from polar_cli.swe.images import ensure_image

                ensure_image(runtime, target.image)
            with local_gateway(config, capture_dir, out_dir) as gateway:
                prep_seconds = time.monotonic() - prep_start
                key = gateway.open_session(session_id, target, workdir)
                spec = SessionSpec(
                    session_id=session_id,
                    harness=adapter,
                    image=target.image,
                    instruction=target.instruction,
                    bundle_container=bundle,
                    base_commit=target.base_commit,
                    workdir=workdir,
                    timeout=timeout,
                    cpus=cpus,
                    memory_bytes=memory_mb * 1024 * 1024 if memory_mb else None,
                )
                outcome = run_session(runtime, spec, Wiring(gateway.url, key), out_dir / "artifacts")
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (RuntimeFailure, UpstreamError, PolarError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    except KeyboardInterrupt as exc:
        typer.echo("interrupted: the session's container was removed", err=True)
        raise typer.Exit(130) from exc
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    result = session_result(outcome, capture_dir, out_dir / "artifacts", target)
    result["engine"] = config.kind if config.kind != "server" else config.dialect
    result["timings"] = {**result["timings"], "prepare": round(prep_seconds, 3)}
    result["timings"]["wall"] = round(time.monotonic() - started, 3)
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    raise typer.Exit(0 if outcome.status == "ok" else 1)


def session_result(outcome: Any, capture_dir: Path, artifacts_dir: Path, target: Target) -> dict[str, Any]:
    """The printed result: the outcome plus what the gateway captured for the session."""
    from polar_cli.capture import read_capture_dir

    records = read_capture_dir(capture_dir).get(outcome.session_id, []) if capture_dir.is_dir() else []
    data = asdict(outcome)
    data.update(
        image=target.image,
        instance_id=target.instance_id,
        model_calls=len(records),
        model_calls_with_tokens=sum(1 for r in records if r.prompt_ids and r.response_ids),
        capture_dir=str(capture_dir),
        artifacts_dir=str(artifacts_dir),
        timings={k: round(v, 3) for k, v in outcome.timings.items()},
    )
    return data

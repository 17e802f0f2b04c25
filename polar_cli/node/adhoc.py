"""One ad-hoc session (`polar run`): what to run, which engine answers it, and the JSON result it prints.

The session itself is `harness.session.run_session`; around it this module resolves the target (an image and an
instruction, or a manifest row), picks the engine (a running server, or the scripted gold/noop policy), makes the
harness bundle and the image ready, and starts the engine and gateway on a background loop (`node.local`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from polar_cli.config import EngineConfig
from polar_cli.errors import ConfigError
from polar_cli.harness.base import HarnessAdapter
from polar_cli.harness.session import SessionOutcome
from polar_cli.translate.dialects import DIALECTS

SCRIPTED = ("gold", "noop")


@dataclass(frozen=True, slots=True)
class Target:
    image: str
    instruction: str
    base_commit: str | None
    instance_id: str | None
    # the instance's reference patch, for the gold engine
    gold_patch: str | None = None


def engine_config(
    upstream: str | None, engine: str | None, model: str | None, tokenizer: str | None, token_in: bool = False
) -> EngineConfig:
    """The engine to answer the session: a running server (``--upstream``) or a scripted policy (``--engine``)."""
    from pydantic import ValidationError

    try:
        if upstream is not None:
            if engine is not None and engine not in DIALECTS:
                raise ConfigError(
                    f"--engine with --upstream names its token fields (the dialect): one of {', '.join(DIALECTS)}"
                )
            return EngineConfig(
                kind="server",
                url=upstream,
                dialect=engine or "sglang",  # type: ignore[arg-type]
                model=model,
                tokenizer=tokenizer,
                token_in=token_in,
            )
        if engine in SCRIPTED:
            return EngineConfig(kind=engine, tokenizer=tokenizer or "qwen3", model=model, token_in=token_in)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(f"engine: {exc.errors()[0]['msg']}") from exc
    raise ConfigError(
        "give --upstream URL (a running SGLang/vLLM) or --engine gold|noop; launching SGLang takes a recipe "
        "(polar generate)"
    )


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


@dataclass(frozen=True, slots=True)
class AdhocRun:
    """What `polar run` was asked for, once its flags are parsed."""

    harness: HarnessAdapter
    engine: EngineConfig
    target: Target
    out_dir: Path
    session_id: str
    workdir: str = "/testbed"
    timeout: float = 1800.0
    cpus: float | None = None
    memory_bytes: int | None = None


def new_session_id() -> str:
    return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def run_adhoc(run: AdhocRun, log: Callable[[str], None]) -> tuple[SessionOutcome, dict[str, Any]]:
    """Run the session to its end; returns its outcome and the result to print. The container is always removed."""
    from polar_cli.harness import Wiring
    from polar_cli.harness.session import SessionSpec, mount_bundle, run_session
    from polar_cli.inference.gold import Task
    from polar_cli.node.local import local_gateway
    from polar_cli.runtime.docker import DockerRuntime
    from polar_cli.swe.images import ensure_image

    started = time.monotonic()
    adapter = run.harness
    target = run.target
    if run.engine.kind == "gold" and not target.gold_patch:
        raise ConfigError("--engine gold applies an instance's reference patch: give --instance and --manifest")
    capture_dir = run.out_dir / "capture"
    with DockerRuntime() as runtime:
        runtime.sweep()
        prep_start = time.monotonic()
        bundle = mount_bundle(runtime, adapter, log=log)
        ensure_image(runtime, target.image)
        with local_gateway(run.engine, capture_dir, run.out_dir) as gateway:
            prep_seconds = time.monotonic() - prep_start
            task = Task(target.instance_id or run.session_id, target.gold_patch or "", run.workdir)
            key = gateway.open_session(run.session_id, task)
            spec = SessionSpec(
                session_id=run.session_id,
                harness=adapter,
                image=target.image,
                instruction=target.instruction,
                bundle=bundle,
                base_commit=target.base_commit,
                workdir=run.workdir,
                timeout=run.timeout,
                cpus=run.cpus,
                memory_bytes=run.memory_bytes,
            )
            outcome = run_session(runtime, spec, Wiring(gateway.url, key), run.out_dir / "artifacts")
    result = session_result(outcome, capture_dir, run.out_dir / "artifacts", target)
    result["engine"] = run.engine.kind if run.engine.kind != "server" else run.engine.dialect
    result["timings"] = {**result["timings"], "prepare": round(prep_seconds, 3)}
    result["timings"]["wall"] = round(time.monotonic() - started, 3)
    return outcome, result


def session_result(outcome: SessionOutcome, capture_dir: Path, artifacts_dir: Path, target: Target) -> dict[str, Any]:
    """The printed result: the outcome plus what the gateway captured for the session."""
    from polar_cli.capture import read_session
    from polar_cli.capture.store import session_file

    path = session_file(capture_dir, outcome.session_id)
    records = read_session(path) if path.exists() else []
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

"""What `polar evaluate` and `polar validate` share: their options, the runtime they open, one progress line per job."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import typer

from polar_cli.commands.common import FAILED, fail
from polar_cli.errors import PolarError

ManifestArg = Annotated[str, typer.Option("--manifest", help="Manifest: .json/.jsonl/.parquet or a datasets name.")]
TemplateOpt = Annotated[
    str | None,
    typer.Option(help="Image for rows without `image`: swe-gym, swe-bench, or a format string over {instance_id}."),
]
TimeoutOpt = Annotated[float, typer.Option(help="Per-instance test timeout in seconds.")]
WorkersOpt = Annotated[int, typer.Option(help="Instances evaluated at once.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]

R = TypeVar("R")


def ids(values: Sequence[str] | None) -> list[str] | None:
    """Repeated and comma-separated values as one list (None when none was given)."""
    if not values:
        return None
    return [part for value in values for part in value.split(",") if part]


def open_runtime() -> Any:
    from polar_cli.runtime.docker import DockerRuntime

    return DockerRuntime()


def run_jobs(
    run_many: Callable[..., list[R]], jobs: Sequence[Any], workers: int, describe: Callable[[R], str]
) -> list[R]:
    """Open the runtime (exit 1 if it cannot be), run the jobs, one progress line per finished job."""
    try:
        runtime = open_runtime()
    except PolarError as exc:
        raise fail(exc, FAILED) from exc
    done = 0

    def report(result: R) -> None:
        nonlocal done
        done += 1
        print(f"[{done}/{len(jobs)}] {describe(result)}", file=sys.stderr, flush=True)

    with runtime:
        return run_many(runtime, jobs, workers=workers, on_done=report)

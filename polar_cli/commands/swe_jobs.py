"""What `polar evaluate` and `polar validate` share: their options, the runtime they open, one progress line per job."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import orjson
import typer

from polar_cli.errors import ConfigError
from polar_cli.swe.eval_logs import RunLogs, check_run_id
from polar_cli.swe.tamper import TAMPER_MODES, TamperMode

ManifestArg = Annotated[str, typer.Option("--manifest", help="Manifest: .json/.jsonl/.parquet or a datasets name.")]
TemplateOpt = Annotated[
    str | None,
    typer.Option(help="Image for rows without `image`: swe-gym, swe-bench, or a format string over {instance_id}."),
]
TimeoutOpt = Annotated[float, typer.Option(help="Per-instance test timeout in seconds.")]
WorkersOpt = Annotated[int, typer.Option(help="Instances evaluated at once.")]
NetworkOpt = Annotated[
    str,
    typer.Option(help="Docker network of the grading containers (SWE-bench 5.0.2's: Docker's default, bridge)."),
]
TamperOpt = Annotated[
    str | None,
    typer.Option(
        help="A patch's changes to test infrastructure its test patch does not own (conftest.py, pytest and tox "
        "config, test files): reject (unresolved, reason 'tamper: PATHS'), revert (those files' changes dropped, the "
        "rest graded) or off. Default: reject.",
        show_default=False,
    ),
]
ExactOpt = Annotated[
    bool,
    typer.Option(
        "--swe-bench-exact",
        help="Verdicts as SWE-bench's grader gives them: --tamper off (the findings are still reported). Nothing "
        "else changes.",
    ),
]
RunIdOpt = Annotated[
    str | None,
    typer.Option(
        help="Name of this run's log directory, <report dir>/logs/run_evaluation/RUN_ID/ (default: the UTC time)."
    ),
]

R = TypeVar("R")


def ids(values: Sequence[str] | None) -> list[str] | None:
    """Repeated and comma-separated values as one list (None when none was given)."""
    if not values:
        return None
    return [part for value in values for part in value.split(",") if part]


def check_options(timeout: float, workers: int, out: Path | None) -> None:
    if timeout <= 0 or workers < 1:
        raise ConfigError("--timeout must be positive and --workers at least 1")
    if out is not None and not out.parent.is_dir():
        raise ConfigError(f"--out {out}: directory {out.parent} does not exist")


def tamper_mode(tamper: str | None, swe_bench_exact: bool) -> TamperMode:
    """``--tamper`` and ``--swe-bench-exact`` as one mode (default reject); the two cannot disagree."""
    if tamper is not None and tamper not in TAMPER_MODES:
        raise ConfigError(f"--tamper {tamper}: expected one of {', '.join(TAMPER_MODES)}")
    if swe_bench_exact and tamper not in (None, "off"):
        raise ConfigError(f"--swe-bench-exact grades with --tamper off, not {tamper}: give one of the two")
    mode: TamperMode = "off" if swe_bench_exact else "reject"
    return next((m for m in TAMPER_MODES if m == tamper), mode)


def run_logs(out: Path | None, run_id: str | None) -> RunLogs:
    """Where the run's logs go: beside the report file (``--out``), else under the working directory."""
    return RunLogs(out.parent if out is not None else Path(), check_run_id(run_id))


def report(payload: dict[str, Any], out: Path | None, as_json: bool, show: Callable[[], None]) -> None:
    """The full report to ``out`` (when given), then JSON on stdout or ``show()``'s table."""
    if out is not None:
        out.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    if as_json:
        typer.echo(orjson.dumps(payload).decode())
    else:
        show()


def open_runtime() -> Any:
    from polar_cli.runtime.docker import DockerRuntime

    return DockerRuntime()


def run_jobs(
    run_many: Callable[..., list[R]],
    jobs: Sequence[Any],
    workers: int,
    describe: Callable[[R], str],
    save: Callable[[R], object] | None = None,
) -> list[R]:
    """Open the runtime, run the jobs, ``save`` each result as it finishes (its logs), one progress line per job.

    Call it under `common.exit_codes`: an OSError from ``save`` stops the run and fails the command.
    """
    runtime = open_runtime()
    done = 0
    lock = threading.Lock()

    def progress(result: R) -> None:
        nonlocal done
        if save is not None:
            save(result)
        with lock:
            done += 1
            print(f"[{done}/{len(jobs)}] {describe(result)}", file=sys.stderr, flush=True)

    with runtime:
        return run_many(runtime, jobs, workers=workers, on_done=progress)

"""`polar report RUN_DIR` (a static HTML report, docs/report.md) and `polar view RUN_DIR` (it, served live)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from polar_cli.commands.common import exit_codes
from polar_cli.errors import ConfigError

RunDir = Annotated[
    Path, typer.Argument(metavar="RUN_DIR", help="Run directory of `polar generate`, or a `polar serve` state dir.")
]


def _check(run_dir: Path) -> None:
    from polar_cli.report.data import run_kind

    try:
        run_kind(run_dir)
    except FileNotFoundError as exc:
        raise ConfigError(str(exc)) from exc


def report(
    run_dir: RunDir,
    session: Annotated[
        str | None, typer.Option(help="Write only this session's viewer (session id or key) and print its path.")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Report directory (default: RUN_DIR/report).")] = None,
) -> None:
    """Write a self-contained HTML report of a run (figures, charts, sessions) and print its path."""
    from polar_cli.report import build_report, find_session

    with exit_codes():
        _check(run_dir)
        if session is not None:
            found = find_session(run_dir, session)
            if found is None:
                raise ConfigError(f"no session {session!r} in {run_dir}")
            built = build_report(run_dir, out, only=found)
            typer.echo(str(built.index.parent / "sessions" / found.page))
            return
        built = build_report(run_dir, out)
    typer.echo(str(built.index))


def view(
    run_dir: RunDir,
    host: Annotated[str, typer.Option(help="Address to listen on (loopback unless told otherwise).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = 8300,
    interval: Annotated[float, typer.Option(help="Seconds between looks at the run's files.")] = 5.0,
) -> None:
    """Serve a run's report on a local port; it rebuilds and reloads as the run goes on."""
    from polar_cli.report.live import view as serve_view

    with exit_codes():
        _check(run_dir)
        serve_view(run_dir, host=host, port=port, interval=interval, ready=lambda url: typer.echo(f"report: {url}"))

"""`polar export atif RUN_DIR`: a run's sessions in another trajectory format (docs/export.md)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from polar_cli.commands.common import exit_codes


class ExportFormat(StrEnum):
    atif = "atif"


def export(
    fmt: Annotated[
        ExportFormat, typer.Argument(metavar="FORMAT", help="atif: Harbor's Agent Trajectory Interchange Format.")
    ],
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="Run directory written by `polar generate`.")],
    out: Annotated[
        Path | None, typer.Option(help="Directory for the files and index.jsonl (default: RUN_DIR/atif).")
    ] = None,
    include_rejects: Annotated[
        bool, typer.Option("--include-rejects", help="Export the sessions of rejects.jsonl too.")
    ] = False,
    prompt_ids: Annotated[
        bool,
        typer.Option(
            "--prompt-ids/--no-prompt-ids",
            help="Each agent step's prompt_token_ids (its whole context: grows with the square of a session).",
        ),
    ] = True,
) -> None:
    """Write one ATIF trajectory per session of a run (token ids and logprobs per step), and an index."""
    from polar_cli.export import export_atif

    with exit_codes():
        result = export_atif(run_dir, out, include_rejects=include_rejects, prompt_ids=prompt_ids)
    skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(result.skipped.items()))
    typer.echo(
        f"{fmt.value}: {result.written} session(s) -> {result.out}" + (f" (skipped: {skipped})" if skipped else "")
    )
    typer.echo(f"index: {result.index}")

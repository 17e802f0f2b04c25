"""`polar generate RECIPE.yaml [--out DIR] [KEY=VALUE ...]`: a resumable batch run, manifest in, corpus out.

Exit codes: 0 every planned session finished (accepted or rejected); 1 some session could not be run (engine,
container or grader failures: they are retried by the next run) or the engine would not start; 2 a bad recipe,
override or manifest; 130 interrupted (Ctrl-C / SIGTERM; the same command resumes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer

from polar_cli.commands.common import FAILED, INTERRUPTED, exit_codes


def generate(
    recipe: Annotated[Path, typer.Argument(help="Recipe YAML (e.g. recipes/demo.yaml).")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Recipe overrides as dotted.key=value, e.g. concurrency.run=8 engine.kind=noop."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Run directory (default: the recipe's output.dir, else runs/<name>).")
    ] = None,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="No live view: log lines on stderr (for cron).")
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    report_every: Annotated[int, typer.Option(help="Rebuild RUN_DIR/report every N finished sessions (0: never).")] = 0,
) -> None:
    """Run a recipe's sessions through real harnesses, grade them, and write the accepted ones as a corpus.

    The run directory holds the run's state: the same command continues an interrupted run, even after kill -9,
    without duplicating or losing a row.
    """
    from polar_cli.config import load_recipe
    from polar_cli.generate.run import Elsewhere
    from polar_cli.generate.run import generate as run_generate
    from polar_cli.report.live import Refresher

    with exit_codes():
        loaded = load_recipe(recipe, overrides or [])
        run_dir = out or Path(loaded.output.dir or Path("runs") / (loaded.name or recipe.stem))
        elsewhere: Elsewhere | None = None
        if loaded.cluster.enabled:
            from polar_cli.cluster.generate import run_on_cluster

            elsewhere = run_on_cluster
        refresher = Refresher(run_dir, report_every) if report_every > 0 else None
        live = not no_progress and not json_
        outcome = run_generate(loaded, run_dir, live=live, elsewhere=elsewhere, refresher=refresher)
    summary = outcome.summary
    if json_:
        typer.echo(orjson.dumps(summary).decode())
    else:
        from rich.console import Console

        from polar_cli.generate.summary import render_summary

        Console().print(render_summary(summary))
    if outcome.interrupted:
        typer.echo(f"interrupted; resume with the same command (run directory {run_dir})", err=True)
        raise typer.Exit(INTERRUPTED)
    if summary["errors_last_segment"] or summary["pending"]:
        raise typer.Exit(FAILED)

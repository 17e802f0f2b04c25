"""`polar doctor [RECIPE.yaml] [KEY=VALUE ...] [--out DIR] [--json]`: what is installed, reachable and missing.

One line per check (``ok`` / ``warn`` / ``fail``, its name, what was found, and what to do), from `polar_cli.doctor`:
the Docker engine, the base and bundle images, the recipe's instance images, its engine and token fields, tokenizer
and chat template, free disk in the run directory, the CA bundle builds carry. Without a recipe: every built-in
harness's bundle, missing ones as warnings. Exit codes: 0 nothing failed (warnings allowed), 1 some check failed,
2 a bad recipe or override.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import orjson
import typer

from polar_cli.commands.common import FAILED, exit_codes
from polar_cli.errors import ConfigError

STYLE = {"ok": "green", "warn": "yellow", "fail": "red"}


def _colour(status: str) -> Callable[[str], str]:
    """The status word in its colour (typer.echo drops colours where the output is not a terminal)."""
    return lambda text: typer.style(text, fg=STYLE[status])


def doctor(
    recipe: Annotated[
        Path | None, typer.Argument(help="Recipe YAML to check a run of (e.g. recipes/demo.yaml).")
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Recipe overrides as dotted.key=value, as polar generate takes them.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Run directory whose disk is checked (default: as polar generate picks it).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Check what a run needs: Docker, images, the engine and its token fields, tokenizer, disk, CA bundle.

    Exits 0 when no check failed (warnings allowed), 1 otherwise.
    """
    from polar_cli.config import load_recipe
    from polar_cli.doctor import diagnose
    from polar_cli.doctor.report import as_json, line

    with exit_codes():
        given = [str(recipe), *(overrides or [])] if recipe is not None else []
        if recipe is not None and "=" in recipe.name and not recipe.exists():
            raise ConfigError(f"overrides need a recipe first: polar doctor RECIPE.yaml {' '.join(given)}")
        loaded = load_recipe(recipe, overrides or []) if recipe is not None else None
        if out is not None:
            run_dir = out
        elif loaded is not None and recipe is not None:
            run_dir = Path(loaded.output.dir or Path("runs") / (loaded.name or recipe.stem))
        else:
            run_dir = Path("runs")
        checks = diagnose(loaded, run_dir)
    result = as_json(checks)
    if json_out:
        typer.echo(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        for check in checks:
            typer.echo(line(check, _colour(check.status)))
        tally = result["counts"]
        typer.echo(f"{tally['ok']} ok, {tally['warn']} warning(s), {tally['fail']} failure(s)")
    if not result["ok"]:
        raise typer.Exit(FAILED)

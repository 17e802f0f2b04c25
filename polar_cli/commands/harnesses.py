"""`polar harnesses [--recipe R] [--harness-config F] [--json]`: every harness, its pin, API, bundle and quirks.

Built-in harnesses always; custom ones from a recipe's ``custom_harnesses`` or a ``--harness-config`` file. The bundle
state asks the local Docker engine and says "no engine" when none answers, so the listing works anywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer

from polar_cli.commands.common import exit_codes
from polar_cli.harness.listing import HarnessRow


def _print_rows(rows: list[HarnessRow]) -> None:
    from rich.console import Console
    from rich.table import Table

    style = {"built": "green", "missing": "red", "no engine": "yellow", "unknown": "red", "none": "dim"}
    table = Table(title="polar harnesses")
    for column in ("harness", "kind", "version", "api", "bundle image", "state"):
        table.add_column(column, overflow="fold")
    for r in rows:
        state = f"[{style[r.state]}]{r.state}[/]"
        table.add_row(r.name, r.kind, r.version or "-", r.api or "-", r.bundle or "-", state)
    console = Console()
    console.print(table)
    for r in rows:
        if r.note:
            console.print(f"{r.name}: {r.note}", markup=False)
        if r.quirks:
            console.print(f"{r.name}: quirks the gateway's codecs apply to its traffic", markup=False)
            for quirk in r.quirks:
                console.print(f"  - {quirk}", markup=False)


def harnesses(
    recipe: Annotated[Path | None, typer.Option(help="Also list this recipe's custom_harnesses")] = None,
    harness_config: Annotated[
        str | None, typer.Option(help="Also list the custom harnesses of this file (as polar run takes it)")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the rows as JSON")] = False,
) -> None:
    """List every harness: version pin, API it speaks, bundle image and its state, and the gateway's quirks for it."""
    from polar_cli.config import load_recipe
    from polar_cli.harness import ADAPTERS
    from polar_cli.harness.custom import custom_adapter, load_harness_config
    from polar_cli.harness.listing import engine_image_check, harness_rows

    with exit_codes():
        custom = dict(load_recipe(recipe).custom_harnesses) if recipe else {}
        if harness_config:
            custom.update(load_harness_config(harness_config))
        adapters = [custom_adapter(name, config) for name, config in custom.items()]
        rows = harness_rows(ADAPTERS.values(), adapters, engine_image_check())
    if json_out:
        typer.echo(orjson.dumps([r.to_dict() for r in rows], option=orjson.OPT_INDENT_2).decode())
        return
    _print_rows(rows)

"""The `polar` command line: the commands of `polar_cli.commands`, registered from its plain list.

A command module that cannot be imported is an error, never a silently missing command.
"""

from __future__ import annotations

import importlib

import typer

from polar_cli.commands import COMMANDS


def build_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, help="Polar: agent harnesses in, trajectories out.")

    @app.callback()
    def _root() -> None:
        """Polar: agent harnesses in, trajectories out."""

    for name, module_name in COMMANDS:
        module = importlib.import_module(f"polar_cli.commands.{module_name}")
        app.command(name)(getattr(module, name.replace("-", "_")))
    return app


def main() -> None:
    build_app()()

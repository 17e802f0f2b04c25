"""The `polar` command line: the commands of `polar_cli.commands`, registered from its plain list.

A command module that cannot be imported is an error, never a silently missing command.
"""

from __future__ import annotations

import importlib
import inspect
import re

import typer

from polar_cli.commands import COMMANDS


def build_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, help="Polar: agent harnesses in, trajectories out.")

    @app.callback()
    def _root() -> None:
        """Polar: agent harnesses in, trajectories out."""

    for name, module_name in COMMANDS:
        module = importlib.import_module(f"polar_cli.commands.{module_name}")
        command = getattr(module, name.replace("-", "_"))
        app.command(name, help=reflow(command.__doc__ or ""))(command)
    return app


def reflow(doc: str) -> str:
    """A docstring as help text: the lines of each paragraph joined, so the terminal wraps them at its own width
    (Typer's rich help keeps a docstring's line breaks, which cut sentences mid-line at 80 columns). A line that opens
    a list item or is indented stays a line of its own."""
    out: list[str] = []
    for raw in inspect.cleandoc(doc).splitlines():
        line = raw.rstrip()
        item = re.match(r"(\s+|[-*] |\d+[.)] )", line) is not None
        if out and out[-1] and line and not item:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return "\n".join(out)


def main() -> None:
    build_app()()

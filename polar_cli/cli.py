"""The `polar` command line.

Each command lives in its own module; heavy dependencies (pyarrow, docker, transformers) are imported inside the
functions that use them, so `polar --help` and `polar proxy` start fast.
"""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Polar: agent harnesses in, trajectories out.")


@app.callback()
def _root() -> None:
    """Polar: agent harnesses in, trajectories out."""


def _register() -> None:
    import importlib

    for name, module, function in _COMMANDS:
        try:
            command = getattr(importlib.import_module(module), function)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise
            continue  # a command whose module is not part of this build
        app.command(name)(command)


_COMMANDS = (
    ("proxy", "polar_cli.gateway.command", "proxy"),
    ("merge-traces", "polar_cli.trajectory.command", "merge_traces"),
    ("evaluate", "polar_cli.swe_command", "evaluate"),
    ("validate", "polar_cli.swe_command", "validate"),
    ("run", "polar_cli.run_command", "run"),
    ("images", "polar_cli.images_command", "images"),
    ("generate", "polar_cli.generate_command", "generate"),
)


def main() -> None:
    _register()
    app()

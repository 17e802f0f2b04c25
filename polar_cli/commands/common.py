"""What the commands share: Polar's error tree mapped to exit codes, one ``error:`` line on stderr, and the options
several of them take alike (those of the commands that serve until stopped, ``--json``).

0    the work ran (a run whose sessions were rejected, or an evaluation of unresolved patches, still ran)
1    the work itself failed: a PolarError other than ConfigError, or the disk (OSError)
2    bad usage: a ConfigError (recipe, flag, manifest, predictions)
130  interrupted (Ctrl-C, or SIGTERM where the command turns it into the same)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from polar_cli.errors import ConfigError, PolarError

USAGE = 2
FAILED = 1
INTERRUPTED = 130

# the options of the commands that serve until stopped (`polar proxy`, `polar serve`)
LogLevelOpt = Annotated[str, typer.Option(help="debug | info | warning")]
MetricsPortOpt = Annotated[int | None, typer.Option(help="Serve Prometheus metrics on this port (docs/metrics.md)")]
MetricsHostOpt = Annotated[str, typer.Option(help="Address of the metrics port")]
# `polar evaluate`, `polar validate`, `polar merge-traces`: the result on stdout as JSON instead of a table
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


def fail(message: object, code: int) -> typer.Exit:
    """Print ``error: message`` on stderr; the caller raises the returned Exit."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def exit_codes(interrupted: str = "interrupted") -> Iterator[None]:
    """Turn an error escaping the block into its exit code and one line (``interrupted`` for Ctrl-C)."""
    try:
        yield
    except ConfigError as exc:
        raise fail(exc, USAGE) from exc
    except (PolarError, OSError) as exc:
        raise fail(exc, FAILED) from exc
    except KeyboardInterrupt as exc:
        typer.echo(interrupted, err=True)
        raise typer.Exit(INTERRUPTED) from exc

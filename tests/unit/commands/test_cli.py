"""The `polar` command line: every command module is registered from one list, and a broken one is an error."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import pytest
import typer
from typer.testing import CliRunner, Result

from polar_cli import cli, commands
from polar_cli.commands.common import exit_codes
from polar_cli.errors import ConfigError, RuntimeFailure, UpstreamError

NOT_COMMANDS = {"common", "swe_jobs"}  # helpers the commands share


def test_help_lists_every_command_of_the_commands_package() -> None:
    result = CliRunner().invoke(cli.build_app(), ["--help"])
    assert result.exit_code == 0, result.output
    modules = {m.name for m in pkgutil.iter_modules(commands.__path__)} - NOT_COMMANDS
    assert modules == {module for _, module in commands.COMMANDS}
    for name, _ in commands.COMMANDS:
        assert name in result.output


def test_a_command_module_that_cannot_be_imported_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "COMMANDS", (*commands.COMMANDS, ("ghost", "ghost")))
    monkeypatch.setattr(cli, "COMMANDS", commands.COMMANDS)
    with pytest.raises(ModuleNotFoundError, match=r"polar_cli\.commands\.ghost"):
        cli.build_app()


def test_python_dash_m_runs_the_same_app(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["polar", "--help"])
    monkeypatch.delitem(sys.modules, "polar_cli.__main__", raising=False)
    with pytest.raises(SystemExit) as exc:
        importlib.import_module("polar_cli.__main__")
    assert exc.value.code == 0 and "merge-traces" in capsys.readouterr().out


def _invoke(error: BaseException) -> Result:
    app = typer.Typer()

    @app.command()
    def boom() -> None:
        with exit_codes(interrupted="stopped"):
            raise error

    return CliRunner().invoke(app, [])


def _exit_of(error: BaseException) -> tuple[int, str]:
    result = _invoke(error)
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (ConfigError("recipe: harnesses: empty"), 2, "error: recipe: harnesses: empty\n"),
        (RuntimeFailure("no Docker engine answers"), 1, "error: no Docker engine answers\n"),
        (UpstreamError("upstream unreachable"), 1, "error: upstream unreachable\n"),
        (OSError(28, "No space left on device"), 1, "error: [Errno 28] No space left on device\n"),
        (KeyboardInterrupt(), 130, "stopped\n"),
    ],
)
def test_the_error_tree_maps_to_exit_codes_with_one_error_prefix(error: BaseException, code: int, line: str) -> None:
    assert _exit_of(error) == (code, line)


def test_a_bug_is_not_dressed_up_as_an_error_line() -> None:
    result = _invoke(ValueError("a bug"))
    assert isinstance(result.exception, ValueError) and "error:" not in result.output

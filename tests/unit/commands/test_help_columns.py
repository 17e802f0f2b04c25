"""Every command's --help reads clean at 80 columns: no line past the width, and no sentence cut mid-line (a
docstring's own line breaks used to survive into the help text)."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from typer.testing import CliRunner

from polar_cli.cli import build_app, reflow
from polar_cli.commands import COMMANDS

WIDTH = 80
_ITEM = re.compile(r"\s*([-*] |\d+[.)] )")


def description(text: str) -> list[str]:
    """The lines of the help text above the first panel (the command's own description)."""
    lines = text.splitlines()
    end = next((i for i, line in enumerate(lines) if line.startswith("╭")), len(lines))
    return [line.rstrip()[1:] if line.startswith(" ") else line.rstrip() for line in lines[:end]]


@pytest.mark.parametrize("name", [name for name, _ in COMMANDS])
def test_help_fits_80_columns_and_fills_its_lines(name: str) -> None:
    result = CliRunner().invoke(build_app(), [name, "--help"], env={"COLUMNS": str(WIDTH), "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    assert all(len(line) <= WIDTH for line in result.output.splitlines()), result.output
    lines = description(result.output)
    for a, b in pairwise(lines):
        if not a.strip() or not b.strip() or _ITEM.match(b) or a.lstrip().startswith("Usage:"):
            continue
        # a line that could have held the next line's first word ends a paragraph, never a sentence mid-way
        assert len(a) + 1 + len(b.split()[0]) > WIDTH - 2, f"{name}: cut mid-line:\n{a}\n{b}"


def test_reflow_joins_paragraph_lines_and_keeps_items() -> None:
    doc = """Grade predictions exactly as
    SWE-bench does.

    - one item
      continued
    - another
    """
    assert reflow(doc) == "Grade predictions exactly as SWE-bench does.\n\n- one item\n  continued\n- another"

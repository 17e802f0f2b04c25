"""What SWE-bench runs for each repository: the test command, how test files become its arguments, the log parser.

The facts are SWE-bench's (``MAP_REPO_VERSION_TO_SPECS`` in swebench 4.1's ``harness/constants/python.py``, its
``get_test_directives`` and ``MAP_REPO_TO_PARSER_PY`` in 5.0.2's ``harness/log_parsers/python.py``; 5.0 moved the
command into each dataset row's ``eval_script``). Where the command varies by version we take the one most versions
use and say so. SWE-Gym's repositories are not in SWE-bench's constants: they run plain ``pytest -rA``.

A row's own ``test_cmd`` always wins (`evaluate.resolve_test_command`); a repository missing here needs one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Directives = Literal["paths", "django_labels"]

PYTEST = "pytest -rA"  # SWE-bench's TEST_PYTEST (the later of its two definitions wins)
DJANGO = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"  # 1.9: without --settings/--parallel
SYMPY = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"
SPHINX = "tox --current-env -epy39 -v --"
SEABORN = "pytest --no-header -rA"
ASTROPY = PYTEST  # 3.0 and later; 0.1-1.3 use "pytest -rA -vv -o console_output_style=classic --tb=no"


@dataclass(frozen=True, slots=True)
class RepoSpec:
    test_cmd: str
    parser: str  # a key of `logparse.PARSERS`
    directives: Directives = "paths"


REPOS: Mapping[str, RepoSpec] = {
    # SWE-bench (full, Lite, Verified)
    "astropy/astropy": RepoSpec(ASTROPY, "pytest_ansi"),
    "django/django": RepoSpec(DJANGO, "django", "django_labels"),
    "matplotlib/matplotlib": RepoSpec(PYTEST, "matplotlib"),
    "mwaskom/seaborn": RepoSpec(SEABORN, "seaborn"),
    "pallets/flask": RepoSpec(PYTEST, "pytest"),
    "psf/requests": RepoSpec(PYTEST, "pytest_options"),
    "pydata/xarray": RepoSpec(PYTEST, "pytest"),
    "pylint-dev/pylint": RepoSpec(PYTEST, "pytest_options"),
    "pytest-dev/pytest": RepoSpec(PYTEST, "pytest"),
    "scikit-learn/scikit-learn": RepoSpec(PYTEST, "pytest_ansi"),
    "sphinx-doc/sphinx": RepoSpec(SPHINX, "pytest_ansi"),
    "sympy/sympy": RepoSpec(SYMPY, "sympy"),
    # the rest of SWE-bench's Python constants (SWE-bench's training split, SWE-Gym lite's sources)
    "marshmallow-code/marshmallow": RepoSpec(PYTEST, "pytest"),
    "pvlib/pvlib-python": RepoSpec(PYTEST, "pytest"),
    "pydicom/pydicom": RepoSpec(PYTEST, "pytest_options"),
    "pylint-dev/astroid": RepoSpec(PYTEST, "pytest"),
    "pyvista/pyvista": RepoSpec(PYTEST, "pytest"),
    "sqlfluff/sqlfluff": RepoSpec(PYTEST, "pytest"),
    # SWE-Gym
    "Project-MONAI/MONAI": RepoSpec(PYTEST, "pytest"),
    "bokeh/bokeh": RepoSpec(PYTEST, "pytest"),
    "conan-io/conan": RepoSpec(PYTEST, "pytest"),
    "dask/dask": RepoSpec(PYTEST, "pytest"),
    "facebookresearch/hydra": RepoSpec(PYTEST, "pytest"),
    "getmoto/moto": RepoSpec(PYTEST, "pytest"),
    "iterative/dvc": RepoSpec(PYTEST, "pytest"),
    "modin-project/modin": RepoSpec(PYTEST, "pytest"),
    "pandas-dev/pandas": RepoSpec(PYTEST, "pytest"),
    "pydantic/pydantic": RepoSpec(PYTEST, "pytest"),
    "python/mypy": RepoSpec(PYTEST, "pytest"),
}


def django_label(path: str) -> str:
    """``tests/foo/test_bar.py`` -> ``foo.test_bar``: Django's runner takes dotted module labels."""
    path = path.removesuffix(".py")
    return path.removeprefix("tests/").replace("/", ".")


def directives(test_files: Sequence[str], style: Directives) -> list[str]:
    """The runner's arguments for ``test_files`` (as `diffs.runner_targets` picks them)."""
    if style == "django_labels":
        return list(dict.fromkeys(django_label(p) for p in test_files))
    return list(test_files)

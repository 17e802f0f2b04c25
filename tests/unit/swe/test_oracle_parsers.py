"""SWE-bench 5.0.2 itself as the oracle: on realistic logs our parsers give its {test: status} map, and our Django
and sympy test directives are the ones its ``get_test_directives`` (4.1, the last release that ships it) builds.

Our pytest parsers also record the full id of a spaced parametrised test beside SWE-bench's first-word key; those
extra keys are pinned here exactly, so the maps are compared in full. The pytest_v2 ones (astropy, scikit-learn,
sphinx) add none.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY

from polar_cli.swe.diffs import runner_targets
from polar_cli.swe.logparse import SWEBENCH_PARSERS, SWEBENCH_UNSUPPORTED, TestStatus, parser_for
from polar_cli.swe.repos import REPOS, directives

DJANGO_LOG = """\
Testing against Django installed in '/testbed/django'
Importing application admin_views
Found 6 test(s).
Skipping setup of unused database(s): other.
System check identified no issues (0 silenced).
test_add_view (admin_views.tests.AdminViewBasicTest.test_add_view) ... ok
test_change_view (admin_views.tests.AdminViewBasicTest.test_change_view) ... FAIL
test_delete_view (admin_views.tests.AdminViewBasicTest.test_delete_view) ... ERROR
test_gis (admin_views.tests.GisTests.test_gis) ... skipped 'Database has feature(s) supports_gis'
test_noisy (admin_views.tests.AdminViewBasicTest.test_noisy) ... Internal Server Error: /test_admin/admin/
ok
test_slow (admin_views.tests.AdminViewBasicTest.test_slow) ...  OK

======================================================================
ERROR: test_delete_view (admin_views.tests.AdminViewBasicTest.test_delete_view)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/testbed/tests/admin_views/tests.py", line 40, in test_delete_view
    raise KeyError("x")
KeyError: 'x'

======================================================================
FAIL: test_change_view (admin_views.tests.AdminViewBasicTest.test_change_view)
----------------------------------------------------------------------
AssertionError: 302 != 200

----------------------------------------------------------------------
Ran 6 tests in 0.412s

FAILED (failures=1, errors=1, skipped=1)
"""

SYMPY_LOG = """\
============================= test process starts ==============================
executable:         /opt/miniconda3/envs/testbed/bin/python  (3.9.19-final-0) [CPython]
architecture:       64-bit
random seed:        81446411
hash randomization: on (PYTHONHASHSEED=2863540311)

sympy/core/tests/test_basic.py[4]
test__aresame ok
test_structure ok
test_equality F
test_atoms E                                                              [FAIL]

sympy/core/tests/test_sympify.py[2]
test_issue_3538 ok
test_sympify_keywords f                                                     [OK]


________________________________________________________________________________
______________ sympy/core/tests/test_basic.py:test_equality ____________________
Traceback (most recent call last):
  File "/testbed/sympy/core/tests/test_basic.py", line 45, in test_equality
    assert Basic() != []
AssertionError
________________________________________________________________________________
________________ sympy/core/tests/test_basic.py:test_atoms _____________________
Traceback (most recent call last):
  File "/testbed/sympy/core/tests/test_basic.py", line 60, in test_atoms
    raise TypeError
TypeError

= tests finished: 3 passed, 1 failed, 1 expected to fail, 1 exceptions, in 0.31 seconds =
DO *NOT* COMMIT!
"""

PYTEST_RA_LOG = """\
============================= test session starts ==============================
collected 7 items

tests/test_slug.py ....F.sx                                              [100%]

=========================== short test summary info ============================
PASSED tests/test_slug.py::test_basic
PASSED tests/test_slug.py::test_slug[Hello World-hello-world]
PASSED tests/test_slug.py::test_paths[/tmp/pytest-of-root/pytest-0/test_paths0/data.txt]
FAILED tests/test_slug.py::test_slug[a - b-a-b] - AssertionError: assert 'a--b' == 'a-b'
FAILED tests/test_slug.py::test_unicode - UnicodeError
SKIPPED [1] tests/test_slug.py:40: needs network
XFAIL tests/test_slug.py::test_known - reason: bug 12
ERROR tests/test_slug.py::test_setup - RuntimeError: fixture exploded
==================== 2 failed, 3 passed, 1 skipped, 1 xfailed, 1 error in 0.12s ====
"""

# our extra keys on PYTEST_RA_LOG: the full ids of the two spaced parametrised tests
SPACED_FULL_IDS = {
    "tests/test_slug.py::test_slug[Hello World-hello-world]": TestStatus.PASSED,
    "tests/test_slug.py::test_slug[a - b-a-b]": TestStatus.FAILED,
}
OPTIONS_ID = "tests/test_slug.py::test_paths[/data.txt]"


def oracle(repo: str, log: str) -> dict[str, str]:
    return MAP_REPO_TO_PARSER_PY[repo](log, None)


def ours(repo: str, log: str) -> dict[str, str]:
    return {test: str(status) for test, status in parser_for(repo)(log).items()}


def test_django_map_is_swebenchs() -> None:
    expected = oracle("django/django", DJANGO_LOG)
    assert ours("django/django", DJANGO_LOG) == expected
    assert expected["test_change_view"] == "FAILED" and expected["test_delete_view"] == "ERROR"
    assert expected["test_noisy (admin_views.tests.AdminViewBasicTest.test_noisy)"] == "PASSED"
    assert len(expected) == 8


def test_sympy_map_is_swebenchs() -> None:
    expected = oracle("sympy/sympy", SYMPY_LOG)
    assert ours("sympy/sympy", SYMPY_LOG) == expected
    assert expected == {
        "sympy/core/tests/test_basic.py:test_equality": "FAILED",
        "sympy/core/tests/test_basic.py:test_atoms": "FAILED",
        "test__aresame": "PASSED",
        "test_structure": "PASSED",
        "test_equality": "FAILED",
        "test_issue_3538": "PASSED",
    }  # "test_atoms E   [FAIL]" ends in neither " E" nor " F": SWE-bench drops it, and so do we


def _extras(repo: str) -> Mapping[str, TestStatus]:
    if repo in ("psf/requests", "pylint-dev/pylint", "pydicom/pydicom"):
        return SPACED_FULL_IDS
    if repo == "mwaskom/seaborn":
        return {}
    if REPOS[repo].parser == "pytest_ansi":  # pytest_v2 key for key: a truncated id is grading's (Rule 1b)
        return {}
    return {
        **SPACED_FULL_IDS,
        "tests/test_slug.py::test_paths[/tmp/pytest-of-root/pytest-0/test_paths0/data.txt]": TestStatus.PASSED,
    }


@pytest.mark.parametrize("repo", sorted(set(MAP_REPO_TO_PARSER_PY) - {"django/django", "sympy/sympy"}))
def test_pytest_maps_are_swebenchs_plus_pinned_extra_keys(repo: str) -> None:
    expected = oracle(repo, PYTEST_RA_LOG)
    got = ours(repo, PYTEST_RA_LOG)
    extras = {k: str(v) for k, v in _extras(repo).items() if k not in expected}
    assert got == {**expected, **extras}


def test_every_swebench_repository_is_in_our_table_with_its_parser_kind() -> None:
    assert set(MAP_REPO_TO_PARSER_PY) <= set(REPOS)
    assert oracle("psf/requests", PYTEST_RA_LOG)[OPTIONS_ID] == "PASSED"


def test_swebench_parser_names_map_to_the_parser_we_use_for_the_same_function() -> None:
    from swebench.harness.log_parsers import PARSER_REGISTRY

    assert set(PARSER_REGISTRY) == set(SWEBENCH_PARSERS) | SWEBENCH_UNSUPPORTED
    assert not set(SWEBENCH_PARSERS) & SWEBENCH_UNSUPPORTED
    # swebench's names are aliases of a few functions; the per-repo oracle tests above compare those with ours
    ours_by_function: dict[int, set[str]] = {}
    for repo, function in MAP_REPO_TO_PARSER_PY.items():
        ours_by_function.setdefault(id(function), set()).add(REPOS[repo].parser)
    for name, ours in SWEBENCH_PARSERS.items():
        assert ours_by_function[id(PARSER_REGISTRY[name])] == {ours}, name


TEST_PATCH = "".join(
    f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"
    for path in ("tests/admin_views/tests.py", "tests/forms_tests/widget_tests/test_select.py", "tests/data.json")
)
# swebench 4.1's get_test_directives on TEST_PATCH for each repo (5.0 ships the result inside each row's eval_script)
SWEBENCH_DIRECTIVES = {
    "django/django": ["admin_views.tests", "forms_tests.widget_tests.test_select"],
    "sympy/sympy": ["tests/admin_views/tests.py", "tests/forms_tests/widget_tests/test_select.py"],
}


@pytest.mark.parametrize("repo", sorted(SWEBENCH_DIRECTIVES))
def test_directives_are_swebenchs(repo: str) -> None:
    assert directives(runner_targets(TEST_PATCH), REPOS[repo].directives) == SWEBENCH_DIRECTIVES[repo]

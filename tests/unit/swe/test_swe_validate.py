from __future__ import annotations

import dataclasses

from swe_fakes import FakeRuntime, marked_log, result

from polar_cli.runtime.base import ExecResult
from polar_cli.swe.evaluate import EvalOptions
from polar_cli.swe.manifest import Instance
from polar_cli.swe.validate import validate_instance

INSTANCE = Instance(
    instance_id="o__r-1",
    repo="o/r",
    base_commit="a" * 40,
    problem_statement="",
    patch="diff --git a/src.py b/src.py\n--- a/src.py\n+++ b/src.py\n@@ -1 +1 @@\n-a\n+b\n",
    test_patch="diff --git a/tests/t.py b/tests/t.py\n--- a/tests/t.py\n+++ b/tests/t.py\n@@ -1 +1 @@\n-a\n+b\n",
    fail_to_pass=("t::bug",),
    pass_to_pass=("t::ok",),
    test_cmd="pytest -rA",
)
OPTIONS = EvalOptions(image="img:1")
APPLIED = result(">>>>> Applied Patch\n")


def runtime(with_fix: str, without_fix: str, apply: ExecResult = APPLIED) -> FakeRuntime:
    def respond(script: str, files: dict[str, bytes]) -> ExecResult:  # type: ignore[override]
        if script == "apply.sh":
            return apply
        patched = files["/tmp/polar-eval/model.patch"].strip() != b""
        return result(with_fix if patched else without_fix)

    return FakeRuntime(respond)  # type: ignore[arg-type]


GOOD_AFTER = marked_log("PASSED t::bug", "PASSED t::ok")
GOOD_BEFORE = marked_log("FAILED t::bug - x", "PASSED t::ok")


def test_valid_instance() -> None:
    v = validate_instance(runtime(GOOD_AFTER, GOOD_BEFORE), INSTANCE, OPTIONS)
    assert (v.status, v.reasons) == ("valid", ())
    assert (v.gold.outcome, v.without_fix.outcome) == ("resolved", "unresolved")


def test_gold_patch_that_does_not_resolve() -> None:
    v = validate_instance(runtime(marked_log("FAILED t::bug - x", "PASSED t::ok"), GOOD_BEFORE), INSTANCE, OPTIONS)
    assert (v.status, v.reasons) == ("broken", ("the gold patch does not resolve it; failing: t::bug",))


def test_gold_patch_that_does_not_apply() -> None:
    v = validate_instance(runtime(GOOD_AFTER, GOOD_BEFORE, apply=result("", 1)), INSTANCE, OPTIONS)
    assert v.reasons == ("the gold patch does not resolve it: the patch did not apply",)


def test_fail_to_pass_that_already_passes() -> None:
    v = validate_instance(runtime(GOOD_AFTER, GOOD_AFTER), INSTANCE, OPTIONS)
    assert v.status == "broken"
    assert v.reasons == ("FAIL_TO_PASS passes without the fix: t::bug", "resolved without any patch")


def test_pass_to_pass_failing_before_the_fix() -> None:
    v = validate_instance(runtime(GOOD_AFTER, marked_log("FAILED t::bug", "ERROR t::ok")), INSTANCE, OPTIONS)
    assert v.reasons == ("PASS_TO_PASS fails without the fix: t::ok",)


def test_empty_fail_to_pass_and_broken_runs() -> None:
    instance = dataclasses.replace(INSTANCE, fail_to_pass=())
    v = validate_instance(runtime(GOOD_AFTER, ">>>>> Test Patch Apply Failed\n"), instance, OPTIONS)
    assert v.reasons == (
        "FAIL_TO_PASS is empty: nothing shows the bug",
        "without the fix the tests do not run: the test patch did not apply",
    )


def test_run_without_markers_is_an_error_not_a_broken_instance() -> None:
    v = validate_instance(runtime(GOOD_AFTER, "no markers"), INSTANCE, OPTIONS)
    reason = "the eval script ended without the test-output markers (exit 0, 10 bytes of output)"
    assert (v.status, v.reasons) == ("error", (reason,))


def test_missing_image_is_an_error_not_a_broken_instance() -> None:
    v = validate_instance(runtime(GOOD_AFTER, GOOD_BEFORE), INSTANCE, EvalOptions(image="absent:1"))
    assert v.status == "error"
    assert len(v.reasons) == 2 and "image absent:1 is not present" in v.reasons[0]
    assert v.to_dict()["status"] == "error"

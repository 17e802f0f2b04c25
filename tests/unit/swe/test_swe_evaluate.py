"""evaluate_instance's control flow on a scripted runtime: what runs, what is skipped, what the verdict says."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest
from swe_fakes import FakeRuntime, marked_log, result

from polar_cli.errors import ConfigError
from polar_cli.runtime.base import ExecResult
from polar_cli.swe.evaluate import (
    EVAL_DIR,
    EvalJob,
    EvalOptions,
    eval_script,
    evaluate_instance,
    evaluate_many,
    resolve_test_command,
    run_job,
    runner_exit_code,
    start_container,
)
from polar_cli.swe.manifest import Instance
from polar_cli.swe.repos import REPOS

INSTANCE = Instance(
    instance_id="o__r-1",
    repo="o/r",
    base_commit="a" * 40,
    problem_statement="",
    patch="diff --git a/src.py b/src.py\n--- a/src.py\n+++ b/src.py\n@@ -1 +1 @@\n-a\n+b\n",
    test_patch="diff --git a/tests/t.py b/tests/t.py\n--- a/tests/t.py\n+++ b/tests/t.py\n@@ -1 +1 @@\n-a\n+b\n",
    fail_to_pass=("tests/t.py::test_bug",),
    pass_to_pass=("tests/t.py::test_ok",),
    test_cmd="pytest -rA",
)
OPTIONS = EvalOptions(image="img:1", timeout=60)
APPLIED = result(">>>>> Applied Patch (git apply --verbose)\n")
FIXED = result(marked_log("PASSED tests/t.py::test_bug", "PASSED tests/t.py::test_ok"))


def responder(**by_script: ExecResult):  # type: ignore[no-untyped-def]
    def respond(script: str, files: Mapping[str, bytes]) -> ExecResult:
        return by_script[script.removesuffix(".sh")]

    return respond


def test_resolved_runs_apply_then_eval_in_a_fresh_container_on_swebenchs_network() -> None:
    runtime = FakeRuntime(responder(apply=APPLIED, eval=FIXED))
    evaluation = evaluate_instance(runtime, INSTANCE, INSTANCE.patch, OPTIONS, "m")
    assert evaluation.outcome == "resolved" and evaluation.patch_applied
    (container,) = runtime.containers
    assert container.scripts == ["apply.sh", "eval.sh"] and container.removed
    assert container.removed_in_background == 1  # graded: nothing waits for the container to go
    # 5.0.2 gives its evaluation containers no network setting: Docker's default bridge
    assert (runtime.specs[0].image, runtime.specs[0].network, runtime.specs[0].role) == ("img:1", "bridge", "eval")
    assert evaluation.to_dict()["network"] == "bridge"
    assert container.files[f"{EVAL_DIR}/model.patch"] == INSTANCE.patch.encode()
    assert b"pytest -rA tests/t.py" in container.files[f"{EVAL_DIR}/eval.sh"]
    assert runtime.timeouts[-1] == 60


def test_failing_pass_to_pass_is_unresolved_with_per_test_report() -> None:
    broke = result(marked_log("PASSED tests/t.py::test_bug", "FAILED tests/t.py::test_ok - boom"))
    evaluation = evaluate_instance(FakeRuntime(responder(apply=APPLIED, eval=broke)), INSTANCE, "x", OPTIONS)
    assert evaluation.outcome == "unresolved"
    report = evaluation.to_dict()
    assert report["tests_status"]["PASS_TO_PASS"] == {"success": [], "failure": ["tests/t.py::test_ok"]}
    assert report["resolved_status"] == "RESOLVED_NO"


def test_patch_that_does_not_apply_skips_the_tests() -> None:
    runtime = FakeRuntime(responder(apply=result(">>>>> Patch Apply Failed\n", 1)))
    evaluation = evaluate_instance(runtime, INSTANCE, "garbage", OPTIONS)
    assert (evaluation.outcome, evaluation.patch_applied) == ("unresolved", False)
    assert evaluation.grade.reason == "the patch did not apply"
    assert runtime.containers[0].scripts == ["apply.sh"] and runtime.containers[0].removed


def test_test_timeout_is_unresolved() -> None:
    hung = result("PASSED tests/t.py::test_bug\n", None, timed_out=True)
    runtime = FakeRuntime(responder(apply=APPLIED, eval=hung))
    evaluation = evaluate_instance(runtime, INSTANCE, INSTANCE.patch, EvalOptions(image="img:1", timeout=5))
    assert evaluation.outcome == "unresolved"
    assert evaluation.grade.reason == "the tests timed out after 5 s"
    assert ">>>>> Tests Timed Out" in evaluation.log
    assert runtime.containers[0].removed


def test_output_without_markers_is_an_error_not_unresolved() -> None:
    cut = result("PASSED tests/t.py::test_bug\nPASSED tests/t.py::test_ok\n")
    evaluation = evaluate_instance(FakeRuntime(responder(apply=APPLIED, eval=cut)), INSTANCE, "x", OPTIONS)
    size = len(cut.output)
    reason = f"the eval script ended without the test-output markers (exit 0, {size} bytes of output)"
    assert (evaluation.outcome, evaluation.reason) == ("error", reason)


def test_the_reason_says_how_the_script_ended() -> None:
    still_running = result("polar-eval: start\n", None)
    evaluation = evaluate_instance(FakeRuntime(responder(apply=APPLIED, eval=still_running)), INSTANCE, "x", OPTIONS)
    assert (
        evaluation.reason
        == "the eval script ended without the test-output markers (its output ended while it still ran)"
    )
    killed = dataclasses.replace(result("Killed\n", 137), oom_killed=True)
    evaluation = evaluate_instance(FakeRuntime(responder(apply=APPLIED, eval=killed)), INSTANCE, "x", OPTIONS)
    assert evaluation.reason is not None and evaluation.reason.endswith("(exit 137, a process was killed for memory)")


def scripted(*evals: ExecResult):  # type: ignore[no-untyped-def]
    """A responder whose eval.sh answers each of ``evals`` in turn, one per container."""
    left = list(evals)

    def respond(script: str, files: Mapping[str, bytes]) -> ExecResult:
        return APPLIED if script == "apply.sh" else left.pop(0)

    return respond


def test_an_evaluation_error_is_tried_again_in_a_fresh_container_and_the_second_verdict_stands() -> None:
    runtime = FakeRuntime(scripted(result("cut short\n", None), FIXED))
    evaluation = run_job(runtime, EvalJob(INSTANCE, INSTANCE.patch, OPTIONS, "m"))
    assert evaluation.outcome == "resolved"
    assert len(runtime.containers) == 2 and all(c.removed for c in runtime.containers)


def test_an_error_on_every_try_stands_and_no_try_is_made_past_the_retries() -> None:
    cut = result("cut short\n", None)
    runtime = FakeRuntime(scripted(cut, cut, cut))
    options = dataclasses.replace(OPTIONS, error_retries=1)
    evaluation = run_job(runtime, EvalJob(INSTANCE, INSTANCE.patch, options))
    assert evaluation.outcome == "error" and len(runtime.containers) == 2
    runtime = FakeRuntime(scripted(cut))
    evaluation = run_job(runtime, EvalJob(INSTANCE, INSTANCE.patch, dataclasses.replace(OPTIONS, error_retries=0)))
    assert evaluation.outcome == "error" and len(runtime.containers) == 1


def test_an_unresolved_verdict_is_never_tried_again() -> None:
    failing = result(marked_log("FAILED tests/t.py::test_bug", "PASSED tests/t.py::test_ok"))
    runtime = FakeRuntime(scripted(failing, FIXED))
    evaluation = run_job(runtime, EvalJob(INSTANCE, INSTANCE.patch, OPTIONS))
    assert evaluation.outcome == "unresolved" and len(runtime.containers) == 1


@pytest.mark.parametrize(("patch", "reason"), [(None, "no patch (model_patch is null)"), ("  \n", "empty patch")])
def test_missing_or_empty_patch_is_unresolved_without_a_container(patch: str | None, reason: str) -> None:
    runtime = FakeRuntime(responder())
    evaluation = evaluate_instance(runtime, INSTANCE, patch, OPTIONS)
    assert (evaluation.outcome, evaluation.grade.reason, runtime.containers) == ("unresolved", reason, [])
    assert evaluation.to_dict()["patch_is_None"] is (patch is None)


def test_empty_patch_runs_the_tests_when_asked() -> None:
    before = result(marked_log("FAILED tests/t.py::test_bug", "PASSED tests/t.py::test_ok"))
    runtime = FakeRuntime(responder(eval=before))
    options = EvalOptions(image="img:1", run_empty=True)
    evaluation = evaluate_instance(runtime, INSTANCE, "", options)
    assert runtime.containers[0].scripts == ["eval.sh"]
    assert evaluation.grade.tests is not None
    assert evaluation.grade.tests.fail_to_pass_failure == ("tests/t.py::test_bug",)


def test_missing_image_is_an_evaluation_error_naming_it() -> None:
    runtime = FakeRuntime(responder(), images=set())
    evaluation = run_job(runtime, EvalJob(INSTANCE, INSTANCE.patch, OPTIONS, "m"))
    assert evaluation.outcome == "error"
    assert evaluation.reason is not None and "image img:1 is not present and cannot be pulled" in evaluation.reason


def test_one_failed_evaluation_does_not_stop_the_batch() -> None:
    runtime = FakeRuntime(responder(apply=APPLIED, eval=FIXED))
    jobs = [EvalJob(INSTANCE, INSTANCE.patch, OPTIONS), EvalJob(INSTANCE, INSTANCE.patch, EvalOptions(image="gone:1"))]
    done: list[str] = []
    results = evaluate_many(runtime, jobs, workers=2, on_done=lambda e: done.append(e.outcome))
    assert [r.outcome for r in results] == ["resolved", "error"]
    assert sorted(done) == ["error", "resolved"]


def test_engine_refusing_a_container_is_an_evaluation_error() -> None:
    runtime = FakeRuntime(responder(), fail_start=True)
    evaluation = run_job(runtime, EvalJob(INSTANCE, INSTANCE.patch, OPTIONS))
    assert (evaluation.outcome, evaluation.reason) == ("error", "evaluation failed: engine went away")


DJANGO = dataclasses.replace(
    INSTANCE,
    repo="django/django",
    test_cmd=None,
    test_patch=(
        "diff --git a/tests/admin_views/test_forms.py b/tests/admin_views/test_forms.py\n"
        "--- a/tests/admin_views/test_forms.py\n+++ b/tests/admin_views/test_forms.py\n@@ -1 +1 @@\n-a\n+b\n"
    ),
)


def test_repository_table_gives_the_command_and_django_labels() -> None:
    script = eval_script(DJANGO, resolve_test_command(DJANGO), "/tmp/t.patch")
    assert f"{REPOS['django/django'].test_cmd} admin_views.test_forms\n" in script
    assert resolve_test_command(dataclasses.replace(DJANGO, repo="sympy/sympy")) == REPOS["sympy/sympy"].test_cmd


def test_row_test_cmd_wins_over_the_table() -> None:
    assert resolve_test_command(dataclasses.replace(DJANGO, test_cmd="python runtests.py")) == "python runtests.py"
    assert resolve_test_command(DJANGO, "override") == "override"


def test_unknown_repository_without_test_cmd_is_an_error_naming_it() -> None:
    unknown = dataclasses.replace(INSTANCE, repo="o/unknown", test_cmd=None)
    with pytest.raises(ConfigError, match=r"'o/unknown' has no known test command; set test_cmd"):
        resolve_test_command(unknown)
    evaluation = run_job(FakeRuntime(responder()), EvalJob(unknown, "x", OPTIONS))
    assert evaluation.outcome == "error" and "'o/unknown'" in (evaluation.reason or "")


def test_a_configuration_error_is_not_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    unknown = dataclasses.replace(INSTANCE, repo="o/unknown", test_cmd=None)
    run_job(FakeRuntime(responder()), EvalJob(unknown, "x", OPTIONS))
    assert "trying again" not in caplog.text
    run_job(FakeRuntime(responder(), fail_start=True), EvalJob(INSTANCE, "x", OPTIONS))
    assert "trying again in a fresh container (1 of 1)" in caplog.text


@pytest.mark.parametrize("code", [126, 127])
def test_runner_that_cannot_start_is_an_error_not_unresolved(code: int) -> None:
    log = marked_log("bash: pytest: command not found") + f">>>>> Test Exit Code: {code}\n"
    evaluation = evaluate_instance(FakeRuntime(responder(apply=APPLIED, eval=result(log))), INSTANCE, "x", OPTIONS)
    assert (evaluation.outcome, evaluation.reason) == (
        "error",
        f"the test runner could not start (exit {code}): check the image and the test command",
    )
    assert runner_exit_code(log) == code


def test_a_container_started_ahead_is_graded_in_and_removed_once() -> None:
    runtime = FakeRuntime(scripted(result("cut short\n", None), FIXED))
    ready = start_container(runtime, OPTIONS)
    evaluation = run_job(runtime, EvalJob(INSTANCE, INSTANCE.patch, OPTIONS, "m"), ready)
    # the first try graded in the container handed in; the retry after its error started a fresh one
    assert evaluation.outcome == "resolved" and runtime.containers[0] is ready
    assert [(c.scripts, c.removed) for c in runtime.containers] == [(["apply.sh", "eval.sh"], 1)] * 2


@pytest.mark.parametrize(
    ("patch", "instance"),
    [(None, INSTANCE), ("  \n", INSTANCE), (INSTANCE.patch, dataclasses.replace(INSTANCE, repo="x/y", test_cmd=""))],
)
def test_a_container_started_ahead_and_never_graded_in_is_removed(patch: str | None, instance: Instance) -> None:
    runtime = FakeRuntime(responder())
    ready = start_container(runtime, OPTIONS)
    evaluation = run_job(runtime, EvalJob(instance, patch, OPTIONS), ready)  # no patch, or a row without tests
    assert evaluation.outcome in ("unresolved", "error") and ready.scripts == [] and ready.removed == 1
    assert len(runtime.containers) == 1  # and no other started

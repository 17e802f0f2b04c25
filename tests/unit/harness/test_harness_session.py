"""run_session on a fake runtime: stage order, statuses, the timeout budget, and removal whatever happens."""

from __future__ import annotations

from pathlib import Path

import pytest

from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionSpec, run_session
from polar_cli.runtime.base import Container, ExecResult
from tests.support.fake_runtime import BASE, PATCH, FakeContainer, FakeRuntime, session_responder


def spec(**kw: object) -> SessionSpec:
    values: dict[str, object] = {
        "session_id": "s1",
        "harness": ADAPTERS["pi"],
        "image": "img",
        "instruction": "do it",
        "bundle": "bundle-pi",
        "timeout": 100.0,
    }
    values.update(kw)
    return SessionSpec(**values)  # type: ignore[arg-type]


WIRING = Wiring("http://127.0.0.1:1", "sk-1")


def runtime_for(harness: ExecResult, **kw: bool) -> FakeRuntime:
    return FakeRuntime(session_responder(harness), **kw)


def test_ok_session_runs_every_stage_and_removes_the_container(tmp_path: Path) -> None:
    runtime = runtime_for(ExecResult(0, b"done\n", False, False, 1.0))
    seen: list[Container] = []
    outcome = run_session(runtime, spec(), WIRING, tmp_path / "art", after_run=seen.append)
    (container,) = runtime.started

    assert outcome.status == "ok" and outcome.exit_code == 0 and outcome.error is None
    assert outcome.patch == PATCH and outcome.base_commit == BASE
    assert outcome.output == "done\n"
    assert outcome.artifacts == ("/root/.pi/agent/sessions",)
    assert (tmp_path / "art/files/root/.pi/agent/sessions/s.jsonl").read_text() == "{}\n"
    assert (tmp_path / "art/harness-output.log").read_bytes() == b"done\n"
    assert set(outcome.timings) == {"create", "init", "run", "postrun", "total"}
    assert seen == [container] and container.removed == 1
    # INIT wrote the harness config; the bundle is mounted; labels name the session
    assert "/root/.pi/agent/models.json" in container.files
    started = runtime.specs[0]
    assert started.volumes_from == ("bundle-pi",) and started.network == "host"
    assert started.labels["polar.session"] == "s1" and started.labels["polar.harness"] == "pi"
    assert container.scripts == ["polar-base", "polar-strip", "harness", "polar-collect"]
    # INIT stripped the repository's history after the base, and the outcome says what went
    assert outcome.stripped is not None and (outcome.stripped.refs, outcome.stripped.repacked) == (2, True)


def test_given_base_commit_skips_git_preparation() -> None:
    runtime = runtime_for(ExecResult(0, b"", False, False, 1.0))
    outcome = run_session(runtime, spec(base_commit="c" * 40), WIRING)
    assert outcome.base_commit == "c" * 40
    assert runtime.started[0].scripts == ["polar-strip", "harness", "polar-collect"]
    # the strip script is told the base commit it keeps
    assert runtime.started[0].execs[0][0][-1] == "c" * 40


def test_strip_history_off_keeps_the_repository_as_the_image_has_it() -> None:
    runtime = runtime_for(ExecResult(0, b"", False, False, 1.0))
    outcome = run_session(runtime, spec(strip_history=False), WIRING)
    assert runtime.started[0].scripts == ["polar-base", "harness", "polar-collect"] and outcome.stripped is None


def test_a_failing_strip_is_an_init_error_and_removes_the_container() -> None:
    harness = ExecResult(0, b"", False, False, 1.0)
    ok = session_responder(harness)

    def respond(name: str, container: FakeContainer) -> ExecResult:
        return (
            ExecResult(4, b"polar: base commit c is not in /testbed", False, False, 0.1)
            if name == "polar-strip"
            else ok(name, container)
        )

    runtime = FakeRuntime(respond)
    outcome = run_session(runtime, spec(), WIRING)
    assert outcome.status == "init_error" and "is not in /testbed" in (outcome.error or "")
    assert runtime.started[0].removed == 1 and runtime.started[0].scripts == ["polar-base", "polar-strip"]


def test_timeout_is_a_status_and_postrun_still_runs() -> None:
    runtime = runtime_for(ExecResult(None, b"partial", True, False, 99.0))
    outcome = run_session(runtime, spec(timeout=100.0), WIRING)
    (container,) = runtime.started
    assert outcome.status == "timeout" and outcome.exit_code is None
    assert outcome.patch and "100 s timeout" in (outcome.error or "")
    # the harness got what was left of the session's budget, which started at INIT
    harness_timeout = next(t for argv, t, _ in container.execs if argv[0] != "/bin/sh")
    assert 90.0 < harness_timeout <= 100.0
    assert container.removed == 1


def test_failing_harness_is_a_harness_error() -> None:
    outcome = run_session(runtime_for(ExecResult(2, b"boom", False, False, 1.0)), spec(), WIRING)
    assert outcome.status == "harness_error" and outcome.exit_code == 2
    assert outcome.error == "the harness exited with 2" and outcome.output == "boom"


def test_stdin_instruction_reaches_the_exec() -> None:
    runtime = runtime_for(ExecResult(0, b"", False, False, 1.0))
    run_session(runtime, spec(instruction="-starts with a dash"), WIRING)
    assert [stdin for argv, _, stdin in runtime.started[0].execs if argv[0] != "/bin/sh"] == [b"-starts with a dash"]


def test_start_failure_is_an_init_error() -> None:
    runtime = runtime_for(ExecResult(0, b"", False, False, 1.0), fail_start=True)
    outcome = run_session(runtime, spec(), WIRING)
    assert outcome.status == "init_error" and outcome.error == "image gone"


def test_container_is_removed_when_anything_raises() -> None:
    runtime = runtime_for(ExecResult(0, b"", False, False, 1.0))

    def interrupt(_: Container) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_session(runtime, spec(), WIRING, after_run=interrupt)
    assert runtime.started[0].removed == 1


def test_a_failing_git_diff_is_a_postrun_error_and_the_container_still_goes() -> None:
    runtime = FakeRuntime(session_responder(ExecResult(0, b"", False, False, 1.0), fail_patch=True))
    outcome = run_session(runtime, spec(), WIRING)
    assert outcome.status == "postrun_error" and "bad object" in (outcome.error or "") and outcome.patch == ""
    assert runtime.started[0].removed == 1


def test_a_failing_config_write_is_an_init_error_and_removes_the_container() -> None:
    runtime = runtime_for(ExecResult(0, b"", False, False, 1.0), fail_put=True)
    outcome = run_session(runtime, spec(), WIRING)
    assert outcome.status == "init_error" and outcome.error == "disk full"
    assert runtime.started[0].removed == 1 and runtime.started[0].scripts == ["polar-base", "polar-strip"]


def test_finish_collects_in_one_exec_then_leaves_the_removal_to_the_background(tmp_path: Path) -> None:
    from polar_cli.harness import session

    runtime = runtime_for(ExecResult(0, b"", False, False, 1.0))
    prepared = session.prepare(runtime, spec(), WIRING)
    collected = session.finish(prepared, tmp_path / "artifacts", b"output")
    (container,) = runtime.started
    assert collected == session.Collected(PATCH, ("/root/.pi/agent/sessions",))
    assert container.scripts[-1] == "polar-collect" and container.removed == container.removed_in_background == 1
    # a patch that cannot be taken still leaves the artifacts the same exec archived
    failing = FakeRuntime(session_responder(ExecResult(0, b"", False, False, 1.0), fail_patch=True))
    collected = session.finish(session.prepare(failing, spec(), WIRING), tmp_path / "again", None)
    assert collected.patch == "" and collected.artifacts == ("/root/.pi/agent/sessions",)
    assert collected.error == "collecting the patch failed (exit 5): fatal: bad object"


def test_an_unreachable_runtime_in_postrun_is_a_collection_error_not_an_exception(tmp_path: Path) -> None:
    """Docker down in POSTRUN: the Docker SDK raises its own connection errors (not RuntimeFailure), and the removal
    fails too; the session still gets its verdict (a postrun error, so a row to retry), and nothing is raised."""
    from polar_cli.harness import session

    runtime = runtime_for(ExecResult(0, b"", False, False, 1.0))
    prepared = session.prepare(runtime, spec(), WIRING)
    container = runtime.started[0]

    def unreachable(*_: object, **__: object) -> ExecResult:
        raise ConnectionError("('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))")

    def cannot_remove(*, wait: bool = True) -> None:
        raise ConnectionError("Connection aborted.")

    container.exec = unreachable  # type: ignore[method-assign]
    container.remove = cannot_remove  # type: ignore[method-assign]
    collected = session.finish(prepared, tmp_path / "artifacts", b"output")
    assert collected.patch == "" and collected.error is not None
    assert collected.error.startswith("collecting the session failed: ('Connection aborted.'")

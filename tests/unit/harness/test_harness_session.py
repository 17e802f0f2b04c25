"""run_session on a fake runtime: stage order, statuses, the timeout budget, and removal whatever happens."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.collect import ARTIFACTS_FILE, PATCH_FILE
from polar_cli.harness.session import SessionSpec, run_session
from polar_cli.runtime.base import Container, ContainerSpec, ExecResult, RuntimeFailure

BASE = "b" * 40


@dataclass
class FakeContainer:
    harness_result: ExecResult
    id: str = "c1"
    files: dict[str, bytes] = field(default_factory=dict)
    execs: list[tuple[list[str], float, bytes | None]] = field(default_factory=list)
    removed: int = 0

    def exec(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | None = None,
        output_cap: int = 8 * 1024 * 1024,
    ) -> ExecResult:
        self.execs.append((list(argv), timeout, stdin))
        name = argv[3] if argv[0] == "/bin/sh" else "harness"
        if name == "polar-base":
            return ExecResult(0, f"{BASE}\n".encode(), False, False, 0.1)
        if name == "polar-patch":
            self.files[PATCH_FILE] = b"diff --git a/x b/x\n"
            return ExecResult(0, b"", False, False, 0.1)
        if name == "polar-artifacts":
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                info = tarfile.TarInfo("root/.pi/agent/sessions/s.jsonl")
                info.size = 3
                tar.addfile(info, io.BytesIO(b"{}\n"))
            self.files[ARTIFACTS_FILE] = buf.getvalue()
            return ExecResult(0, b"", False, False, 0.1)
        return self.harness_result

    def put_files(self, files: Mapping[str, bytes], mode: int = 0o644) -> None:
        self.files.update(files)

    def get_file(self, path: str) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    def remove(self) -> None:
        self.removed += 1


@dataclass
class FakeRuntime:
    container: FakeContainer
    fail_start: bool = False
    specs: list[ContainerSpec] = field(default_factory=list)

    def start(self, spec: ContainerSpec) -> FakeContainer:
        self.specs.append(spec)
        if self.fail_start:
            raise RuntimeFailure("image gone")
        return self.container

    def image_exists(self, image: str) -> bool:
        return True

    def sweep(self) -> int:
        return 0


def spec(**kw: object) -> SessionSpec:
    values: dict[str, object] = {
        "session_id": "s1",
        "harness": ADAPTERS["pi"],
        "image": "img",
        "instruction": "do it",
        "bundle_container": "bundle-pi",
        "timeout": 100.0,
    }
    values.update(kw)
    return SessionSpec(**values)  # type: ignore[arg-type]


WIRING = Wiring("http://127.0.0.1:1", "sk-1")


def test_ok_session_runs_every_stage_and_removes_the_container(tmp_path: Path) -> None:
    container = FakeContainer(ExecResult(0, b"done\n", False, False, 1.0))
    runtime = FakeRuntime(container)
    seen: list[Container] = []
    outcome = run_session(runtime, spec(), WIRING, tmp_path / "art", after_run=seen.append)

    assert outcome.status == "ok" and outcome.exit_code == 0 and outcome.error is None
    assert outcome.patch == "diff --git a/x b/x\n" and outcome.base_commit == BASE
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
    order = [argv[3] if argv[0] == "/bin/sh" else "harness" for argv, _, _ in container.execs]
    assert order == ["polar-base", "harness", "polar-artifacts", "polar-patch"]


def test_given_base_commit_skips_git_preparation() -> None:
    container = FakeContainer(ExecResult(0, b"", False, False, 1.0))
    outcome = run_session(FakeRuntime(container), spec(base_commit="c" * 40), WIRING)
    assert outcome.base_commit == "c" * 40
    assert [argv[3] for argv, _, _ in container.execs if argv[0] == "/bin/sh"] == ["polar-patch"]


def test_timeout_is_a_status_and_postrun_still_runs() -> None:
    container = FakeContainer(ExecResult(None, b"partial", True, False, 99.0))
    outcome = run_session(FakeRuntime(container), spec(timeout=100.0), WIRING)
    assert outcome.status == "timeout" and outcome.exit_code is None
    assert outcome.patch and "100 s timeout" in (outcome.error or "")
    # the harness got what was left of the session's budget, which started at INIT
    harness_timeout = next(t for argv, t, _ in container.execs if argv[0] != "/bin/sh")
    assert 90.0 < harness_timeout <= 100.0
    assert container.removed == 1


def test_failing_harness_is_a_harness_error() -> None:
    container = FakeContainer(ExecResult(2, b"boom", False, False, 1.0))
    outcome = run_session(FakeRuntime(container), spec(), WIRING)
    assert outcome.status == "harness_error" and outcome.exit_code == 2
    assert outcome.error == "the harness exited with 2" and outcome.output == "boom"


def test_stdin_instruction_reaches_the_exec() -> None:
    container = FakeContainer(ExecResult(0, b"", False, False, 1.0))
    run_session(FakeRuntime(container), spec(instruction="-starts with a dash"), WIRING)
    assert [stdin for argv, _, stdin in container.execs if argv[0] != "/bin/sh"] == [b"-starts with a dash"]


def test_start_failure_is_an_init_error() -> None:
    runtime = FakeRuntime(FakeContainer(ExecResult(0, b"", False, False, 1.0)), fail_start=True)
    outcome = run_session(runtime, spec(), WIRING)
    assert outcome.status == "init_error" and outcome.error == "image gone"


def test_container_is_removed_when_anything_raises() -> None:
    container = FakeContainer(ExecResult(0, b"", False, False, 1.0))

    def interrupt(_: Container) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_session(FakeRuntime(container), spec(), WIRING, after_run=interrupt)
    assert container.removed == 1

"""A scripted runtime for evaluation tests: each exec answers from a table keyed by the script it runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from polar_cli.runtime.base import ContainerSpec, ExecResult, RuntimeFailure
from polar_cli.swe import grading

# answers an exec: (script name, files written so far) -> result
Responder = Callable[[str, Mapping[str, bytes]], ExecResult]


def result(output: str, exit_code: int | None = 0, *, timed_out: bool = False) -> ExecResult:
    return ExecResult(exit_code, output.encode(), timed_out, False, 0.01)


def marked_log(*lines: str) -> str:
    return "\n".join([grading.START_TEST_OUTPUT, *lines, grading.END_TEST_OUTPUT, ""])


@dataclass
class FakeContainer:
    id: str
    runtime: FakeRuntime
    files: dict[str, bytes] = field(default_factory=dict)
    execs: list[str] = field(default_factory=list)
    removed: bool = False

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
        script = argv[-1].rsplit("/", 1)[-1]
        self.execs.append(script)
        self.runtime.timeouts.append(timeout)
        return self.runtime.respond(script, self.files)

    def put_files(self, files: Mapping[str, bytes], mode: int = 0o644) -> None:
        self.files.update(files)

    def get_file(self, path: str) -> bytes:
        try:
            return self.files[path]
        except KeyError:
            raise FileNotFoundError(path) from None

    def remove(self) -> None:
        self.removed = True


@dataclass
class FakeRuntime:
    respond: Responder
    images: set[str] = field(default_factory=lambda: {"img:1"})
    containers: list[FakeContainer] = field(default_factory=list)
    specs: list[ContainerSpec] = field(default_factory=list)
    timeouts: list[float] = field(default_factory=list)
    fail_start: bool = False

    def start(self, spec: ContainerSpec) -> FakeContainer:
        if self.fail_start:
            raise RuntimeFailure("engine went away")
        self.specs.append(spec)
        container = FakeContainer(f"c{len(self.containers)}", self)
        self.containers.append(container)
        return container

    def image_exists(self, image: str) -> bool:
        return image in self.images

    def sweep(self) -> int:
        return 0

    def __enter__(self) -> FakeRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

"""The shared fake runtime (`tests.support.fake_runtime`) answering evaluation scripts from a table of results."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from polar_cli.runtime.base import ExecResult
from polar_cli.swe import grading
from tests.support import fake_runtime
from tests.support.fake_runtime import FakeContainer, result

__all__ = ["FakeRuntime", "Responder", "marked_log", "result"]

# answers an exec: (script name, files written so far) -> result
Responder = Callable[[str, Mapping[str, bytes]], ExecResult]


def marked_log(*lines: str) -> str:
    return "\n".join([grading.START_TEST_OUTPUT, *lines, grading.END_TEST_OUTPUT, ""])


class FakeRuntime(fake_runtime.FakeRuntime):
    def __init__(self, respond: Responder, **kw: Any) -> None:
        def answer(name: str, container: FakeContainer) -> ExecResult:
            return respond(name, container.files)

        kw.setdefault("start_error", "engine went away")
        super().__init__(answer, **kw)

    @property
    def containers(self) -> list[FakeContainer]:
        return self.started

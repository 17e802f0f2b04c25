"""Files written by the exec that needs them (`runtime.inline`): the write script on this host's sh, byte for byte;
`exec_with_files` choosing argv or a copy in; the SWE evaluation's files going in with its first exec, and a write that
fails being the evaluation's error (retried, the container removed), as a failed copy in was (issue 27.4)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from polar_cli.errors import RuntimeFailure
from polar_cli.runtime.inline import FILE_MAX, WRITE_FAILED, WRITE_FAILED_EXIT, WRITE_SCRIPT, exec_with_files
from polar_cli.swe.evaluate import EvalJob, EvalOptions, run_job
from tests.support.fake_runtime import FakeContainer, FakeRuntime, result
from tests.unit.generate.test_generate_patch_parses import INSTANCE, responder


def test_the_write_script_writes_each_file_as_given_then_runs_the_command(tmp_path: Path) -> None:
    text = "a\n$(echo no)\n`no` \\n %s %% '\"\n--\n\n\n"
    files = [str(tmp_path / "new" / "dir" / "a"), text, str(tmp_path / "b"), "--", str(tmp_path / "c"), ""]
    argv = ["/bin/sh", "-c", WRITE_SCRIPT, "polar-write", *files, "--", "sh", "-c", 'cat "$@"; exit 3', "x", files[0]]
    done = subprocess.run(argv, capture_output=True)
    assert done.returncode == 3 and done.stdout == text.encode()  # the command's own status and output
    assert (tmp_path / "b").read_bytes() == b"--" and (tmp_path / "c").read_bytes() == b""


def test_the_write_script_stops_before_the_command_when_a_file_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    argv = ["/bin/sh", "-c", WRITE_SCRIPT, "polar-write", str(tmp_path / "file" / "x"), "c", "--", "echo", "ran"]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == WRITE_FAILED_EXIT and done.stdout.startswith(f"{WRITE_FAILED} {tmp_path}/file/x: ")
    assert "ran" not in done.stdout


class Counting(FakeContainer):
    def __init__(self, *, fail_put: bool = False) -> None:
        super().__init__("c0", None, lambda name, container: result("ran"), fail_put=fail_put)  # type: ignore[arg-type]
        self.puts = 0

    def put_files(self, files: object, mode: int = 0o644) -> None:
        self.puts += 1
        super().put_files(files, mode)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "puts"),
    [
        (b"#!/bin/bash\necho \xc3\xa9\n", 0),  # text: in the exec's argv
        (b"\xff\xfe binary", 1),  # not UTF-8: copied in first
        (b"a\0b", 1),  # a NUL no argument can carry
        (b"x" * (FILE_MAX + 1), 1),  # past what one argument may hold
    ],
)
def test_exec_with_files_writes_text_that_fits_in_the_exec_and_copies_the_rest_in(data: bytes, puts: int) -> None:
    container = Counting()
    done = exec_with_files(container, {"/tmp/d/f": data}, ["bash", "/tmp/d/f"], timeout=5.0)
    assert done.output == b"ran" and container.puts == puts and container.files["/tmp/d/f"] == data
    assert [argv for argv, _, _ in container.execs] == [["bash", "/tmp/d/f"]]


def test_exec_with_files_raises_when_a_file_cannot_be_written() -> None:
    with pytest.raises(RuntimeFailure, match="disk full"):
        exec_with_files(Counting(fail_put=True), {"/tmp/d/f": b"x"}, ["true"], timeout=5.0)


def test_the_evaluation_files_go_in_with_its_first_exec() -> None:
    runtime = FakeRuntime(responder)
    evaluation = run_job(runtime, EvalJob(INSTANCE, INSTANCE.patch, EvalOptions("img:1")))
    container = runtime.started[0]
    assert evaluation.resolved and container.scripts == ["apply.sh", "eval.sh"]
    assert container.files["/tmp/polar-eval/model.patch"] == INSTANCE.patch.encode()
    assert container.files["/tmp/polar-eval/test.patch"] == INSTANCE.test_patch.encode()


def test_an_evaluation_whose_files_cannot_be_written_is_an_error_tried_again_and_leaves_no_container() -> None:
    runtime = FakeRuntime(responder, fail_put=True)
    evaluation = run_job(runtime, EvalJob(INSTANCE, INSTANCE.patch, EvalOptions("img:1")))
    assert evaluation.outcome == "error" and "disk full" in (evaluation.reason or "")
    assert [(c.scripts, c.removed) for c in runtime.started] == [([], 1), ([], 1)]  # two tries, nothing run

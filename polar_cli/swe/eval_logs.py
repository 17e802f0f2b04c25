"""Every evaluation's whole logs on disk, in SWE-bench's layout, next to the report that grades them.

``<root>/logs/run_evaluation/<run_id>/<model>/<instance_id>/`` holds

- ``test_output.txt``: the test run's whole output (`Evaluation.test_output`), byte for byte;
- ``run_instance.log``: the patch-apply output (empty when no patch was applied);
- ``report.json``: the instance's report entry (`Evaluation.to_dict` plus ``log_path``).

``root`` is the directory of the report file (``--out``), else the working directory, as SWE-bench's (`polar
generate`: the run directory, with one directory per session in place of ``<instance_id>``: ``name``). The report's
``log_path`` is ``test_output.txt``'s path relative to ``root``. Each file is written to a temp file beside it and
renamed into place, so a reader never sees half a log; a failed write raises OSError.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from polar_cli.errors import ConfigError
from polar_cli.swe.evaluate import Evaluation

RUN_EVALUATION = Path("logs") / "run_evaluation"
TEST_OUTPUT = "test_output.txt"
APPLY_LOG = "run_instance.log"
REPORT = "report.json"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def default_run_id() -> str:
    """A run id from the time (UTC, to the microsecond, so two runs a second apart do not share a directory)."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def check_run_id(run_id: str | None) -> str:
    """``run_id`` when it is one safe path component, the default when it is None; else ConfigError."""
    if run_id is None:
        return default_run_id()
    if not _RUN_ID.match(run_id):
        raise ConfigError(f"--run-id {run_id!r}: use letters, digits, '.', '_' and '-' (not first)")
    return run_id


def _component(name: str) -> str:
    """``name`` as one path component: SWE-bench's ``/`` -> ``__``, and never empty, ``.`` or ``..``."""
    safe = name.replace("/", "__").replace(os.sep, "__").replace("\0", "_")
    return safe if safe not in ("", ".", "..") else f"_{safe}"


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` to ``path`` through a temp file in the same directory and a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True, slots=True)
class RunLogs:
    root: Path  # the report's directory
    run_id: str

    def instance_dir(self, model: str, instance_id: str) -> Path:
        """The instance's log directory, relative to ``root``."""
        return RUN_EVALUATION / _component(self.run_id) / _component(model) / _component(instance_id)

    def log_path(self, evaluation: Evaluation, name: str | None = None) -> str:
        """``test_output.txt``'s path relative to ``root`` (POSIX separators), as the report links it.

        ``name`` replaces the instance id as the directory's name (one directory per session of one instance).
        """
        return (self.instance_dir(evaluation.model, name or evaluation.instance_id) / TEST_OUTPUT).as_posix()

    def entry(self, evaluation: Evaluation, name: str | None = None) -> dict[str, Any]:
        """The report entry: `Evaluation.to_dict` with ``log_path``."""
        return {**evaluation.to_dict(), "log_path": self.log_path(evaluation, name)}

    def write(self, evaluation: Evaluation, name: str | None = None) -> dict[str, Any]:
        """Write the evaluation's logs and its report.json; returns the report entry. A failed write is OSError."""
        directory = self.root / self.instance_dir(evaluation.model, name or evaluation.instance_id)
        directory.mkdir(parents=True, exist_ok=True)
        entry = self.entry(evaluation, name)
        write_atomic(directory / TEST_OUTPUT, evaluation.test_output.encode())
        write_atomic(directory / APPLY_LOG, evaluation.apply_log.encode())
        write_atomic(directory / REPORT, orjson.dumps(entry, option=orjson.OPT_INDENT_2))
        return entry

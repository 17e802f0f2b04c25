"""The TaskRequest's own checks (`serve.models`)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from polar_cli.serve.models import TaskRequest

TASK = {"task_id": "t1", "instruction": "fix it", "runtime": {"image": "img"}, "harness": "pi"}


@pytest.mark.parametrize("task_id", ["t1\n", "t1\r\n", "\nt1", "t1\x00", "../t1", ".t1", "t" * 129, ""])
def test_task_ids_that_could_name_another_file_are_refused(task_id: str) -> None:
    # `$` matches before a trailing newline: "t1\n" once made a file `results/t1\n.jsonl`
    with pytest.raises(ValidationError, match="task_id"):
        TaskRequest.model_validate({**TASK, "task_id": task_id})


@pytest.mark.parametrize("task_id", ["t1", "group-7.sample:3", "_x", "t" * 128])
def test_plain_task_ids_are_accepted(task_id: str) -> None:
    assert TaskRequest.model_validate({**TASK, "task_id": task_id}).task_id == task_id

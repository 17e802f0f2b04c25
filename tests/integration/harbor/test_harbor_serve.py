"""`polar serve` on a Harbor task: a TaskRequest with ``harbor_task``, Pi in Docker, the task's verifier as evaluator.

Gold runs the oracle in every sample (reward 1.0 each, the verifier's named values in the report); noop none (0.0).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from polar_cli.serve.models import HarborEvaluator, TaskRequest
from tests.integration.serve.serve_process import service

pytestmark = pytest.mark.integration
TIMEOUT = 900
TASK = Path(__file__).resolve().parents[3] / "recipes" / "demo-terminal" / "log-summary"


def test_the_request_model_takes_a_harbor_task() -> None:
    request = TaskRequest.model_validate({"task_id": "h", "harbor_task": str(TASK), "harness": "pi"})
    assert isinstance(request.evaluator_spec(), HarborEvaluator)
    for bad in (
        {"task_id": "h", "harbor_task": str(TASK), "instance": {"manifest": "m.jsonl", "instance_id": "x"}},
        {"task_id": "h", "instruction": "x", "runtime": {"image": "i"}, "evaluator": {"type": "harbor"}},
    ):
        with pytest.raises(ValueError, match="harbor_task"):
            TaskRequest.model_validate({**bad, "harness": "pi"})


@pytest.mark.parametrize(("engine", "reward"), [("gold", 1.0), ("noop", 0.0)])
def test_a_trainer_gets_a_group_graded_by_the_harbor_verifier(tmp_path: Path, engine: str, reward: float) -> None:
    with service(tmp_path, {"kind": engine}) as svc:
        svc.client.submit({"task_id": "harbor-1", "harbor_task": str(TASK), "harness": "pi", "num_samples": 2})
        result = svc.client.wait("harbor-1", timeout=TIMEOUT)
    assert result.rewards == [reward, reward], result.sessions
    for session in result.sessions:
        evaluation = session["evaluation"]
        assert evaluation["type"] == "harbor" and evaluation["task_kind"] == "harbor"
        assert evaluation["rewards"] == {"reward": reward, "requests": reward, "errors": reward, "top_ip": reward}

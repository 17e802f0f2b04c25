"""The real trainer (issue 24, item 2): examples/trl_grpo/run trains TRL's GRPOTrainer on `polar serve`'s groups for
two optimizer steps on CPU (the tiny Qwen3 on vLLM CPU, Pi in Docker), as a user runs it, and what
../shared/TRAINERS.md lists holds: the rows are Polar's traces, the parameters changed, the engine serves the new
weights (its probe equals the trainer's, and moved), later samples carry the new version.

Needs .venv-vllm, the models, Docker and the Pi bundle; `run` installs the `trl` extra's pins itself. A missing part
fails, never skips.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from polar_cli.capture import read_session

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
STEPS = 2


def test_trl_trains_on_polar_groups_and_the_engine_serves_each_step(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        ["bash", "examples/trl_grpo/run", "--steps", str(STEPS), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    for k, s in enumerate(steps, start=1):
        assert s["rows"] == 4 and s["loss"] is not None and s["grad_norm"] is not None
        # the rows trained at step k were sampled under the weights of step k-1, and only those
        assert s["weight_version"] == f"step-{k - 1}" and s["versions_seen"] == [f"step-{k - 1}"], s
        if k > 1:  # the sync before this step's rollout: the engine's probe moved, and is the trainer's
            moved = max(abs(a - b) for a, b in zip(s["probe_before"], s["probe_after"], strict=True))
            assert moved > 1e-4 and s["probe_trainer_off"] < 1e-3, s
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["parameters_changed"] > 0
    assert summary["final_sync"]["probe_trainer_off"] < 1e-3
    # the rows are Polar's: every task's sessions are in the service's journal and capture
    state = out / "serve"
    journaled = {json.loads(line).get("task_id") for line in (state / "journal.jsonl").read_text().splitlines()}
    assert {t for s in steps for t in s["task_ids"]} <= journaled
    captured = list((state / "capture").glob("*.jsonl"))
    assert len(captured) >= 4 * STEPS
    versions = {r.weight_version for path in captured for r in read_session(path)}
    assert versions == {f"step-{k}" for k in range(STEPS)}

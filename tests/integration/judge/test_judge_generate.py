"""`polar generate recipes/demo.yaml` with a ``judge:`` section pointing at the REAL vLLM CPU server (SmolLM2-135M,
structured answers): real harness (Pi), real containers, real grading, then the judge in POSTRUN.

Whatever the small model scores, every session ends with a row whose ``judge`` holds in-range scores per criterion,
the rubric's hash, the prompt's hash and the record of its calls, and whose reward is the weighted mean of the tests'
reward and the judge's score; or, where the judge could not answer usably, an errors row ``judge_error`` (a
machinery error, exit 1: the next run retries it), never a reward of 0. The judge's calls are in
``artifacts/<session>/judge.jsonl`` and in no capture file, and rebuilding the prompt from the session's capture
records gives the row's ``prompt_sha256``. Needs Docker, the demo's images (scripts/setup-docker), .venv-vllm and
the models (scripts/setup-tests): a missing part fails, never skips.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import read_session
from polar_cli.config import load_recipe
from polar_cli.judge.client import Judge
from polar_cli.trajectory import prefix_merging
from tests.support.vllm_server import VLLMServer
from tests.unit.judge.judge_support import RUBRIC_YAML

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
INSTANCES = 2
TIMEOUT = 900


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_generate_demo_with_a_vllm_judge(smollm2: VLLMServer, tmp_path: Path) -> None:
    rubric = tmp_path / "rubric.yaml"
    rubric.write_bytes(RUBRIC_YAML)
    out = tmp_path / "run"
    judge = [
        f"judge.rubric={rubric}",
        f"judge.url={smollm2.url}/v1",
        "judge.model=smollm2",
        "judge.mode=weighted",
        "judge.threshold=0.5",
        "judge.max_tokens=160",
        "judge.retries=2",
    ]
    command = [sys.executable, "-m", "polar_cli", "generate", str(ROOT / "recipes" / "demo.yaml")]
    command += [f"manifest.limit={INSTANCES}", *judge, "--out", str(out), "--json"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    judged = rows(out / "corpus.jsonl") + rows(out / "rejects.jsonl")
    errors = rows(out / "errors.jsonl")
    assert len({r["key"] for r in judged}) + len(errors) == INSTANCES, done.stderr[-3000:]
    # the only error a judge may cause is its own, and that run exits 1 (the key is retried)
    assert all(r["status"] == "JUDGE_ERROR" and r["reason"].startswith("judge_error: ") for r in errors)
    assert done.returncode == (1 if errors else 0), done.stderr[-3000:]
    recipe = load_recipe(ROOT / "recipes" / "demo.yaml", [f"manifest.limit={INSTANCES}", *judge])
    assert recipe.judge is not None
    rebuilt = Judge.open(recipe.judge, None, "unused")
    for row in judged:
        verdict = row["judge"]
        assert row["eval"]["resolved"] is True  # gold: the tests pass, so the weighted reward is at least 0.5
        assert set(verdict["criteria"]) == {"correctness", "process"}
        assert all(0.0 <= c["score"] <= 1.0 for c in verdict["criteria"].values()) and 0.0 <= verdict["score"] <= 1.0
        assert row["reward"] == pytest.approx(0.5 * 1.0 + 0.5 * verdict["score"], abs=1e-5)
        assert row["accepted"] is True and verdict["passed"] is True and verdict["model"] == "smollm2"
        assert verdict["rubric_sha256"] == hashlib.sha256(RUBRIC_YAML).hexdigest()
        # the judge's calls are recorded apart, in the session's artifacts, and in no capture file
        record = out / verdict["record"]
        calls = rows(record)
        assert len(calls) == verdict["calls"] >= 1 and calls[-1]["status"] == "ok"
        captured = read_session(out / "capture" / f"{row['session_id']}.jsonl")
        assert captured and all(r.normalized is not None for r in captured)
        assert not any("strict reviewer" in p.read_text() for p in (out / "capture").glob("*.jsonl"))
        # the prompt is reproducible from the session's own records
        requests, _ = rebuilt.prompts(prefix_merging(captured, None).traces, captured)
        assert (
            verdict["prompt_sha256"]
            == hashlib.sha256(
                json.dumps(requests, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
            ).hexdigest()
        )
        assert [c["request"]["messages"] for c in calls if c["status"] == "ok"] == requests

"""`polar generate recipes/demo.yaml` end to end: real harness, real containers, real grading.

Every gold attempt is accepted and every noop attempt rejected; the corpus loads with datasets; a run killed with
SIGKILL mid-way and rerun finishes with no duplicate and no truncated row, every row written before the kill kept,
and the dead run's containers swept. Needs Docker and the images scripts/setup-docker builds: a missing engine fails,
never skips. ``POLAR_DEMO_OVERRIDES`` (e.g. ``"harnesses=[claude-code]"``) runs the same checks with other settings.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from polar_cli.errors import RuntimeFailure
from polar_cli.runtime.base import MANAGED_LABEL, OWNER_LABEL
from polar_cli.runtime.docker import connect
from polar_cli.swe.manifest import load_manifest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "recipes" / "demo.yaml"
OVERRIDES = shlex.split(os.environ.get("POLAR_DEMO_OVERRIDES", ""))
TIMEOUT = 900


@pytest.fixture(scope="module")
def docker_client() -> Any:
    try:
        return connect(timeout=600)
    except RuntimeFailure as exc:
        pytest.fail(f"{exc}; run scripts/setup-docker")


@pytest.fixture(scope="module")
def instances() -> int:
    manifest = next((o.split("=", 1)[1] for o in OVERRIDES if o.startswith("manifest.source=")), None)
    return len(load_manifest(manifest or ROOT / "recipes" / "demo" / "instances.jsonl"))


def command(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "polar_cli", "generate", str(RECIPE), *OVERRIDES, *extra, "--out", str(out)]


def generate(out: Path, *extra: str) -> dict[str, Any]:
    done = subprocess.run([*command(out, *extra), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-5000:]}"
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in complete_lines(path)]


def complete_lines(path: Path) -> list[bytes]:
    if not path.exists():
        return []
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].splitlines(keepends=True)


def test_gold_accepts_every_attempt_and_the_corpus_loads(tmp_path: Path, docker_client: Any, instances: int) -> None:
    summary = generate(tmp_path)
    assert summary["attempts"] == summary["accepted"] == summary["planned"] == instances
    assert summary["errors_last_segment"] == 0 and summary["pending"] == 0
    corpus = rows(tmp_path / "corpus.jsonl")
    assert len(corpus) == instances and rows(tmp_path / "rejects.jsonl") == []
    for row in corpus:
        assert row["accepted"] is True and row["status"] == "OK" and row["reward"] == 1.0, row["reason"]
        assert row["eval"]["resolved"] is True and row["patch"].startswith("diff --git")
        assert row["messages"][-1]["role"] == "assistant" and any(m["role"] == "tool" for m in row["messages"])
        # one row per trace (segment): the demo's gold session is one conversation, so one root row each
        assert (row["trace_index"], row["trace_count"], row["lineage"]["kind"]) == (0, 1, "root")
        assert not any(m.get("weight") == 0 for m in row["messages"])
        trace = row["trace"]
        assert len(trace["loss_mask"]) == len(trace["response_ids"]) == len(trace["response_logprobs"])
        assert sum(trace["loss_mask"]) == row["stats"]["trainable_tokens"] > 0
        assert set(row["timing"]) >= {"init", "ready_wait", "run", "postrun", "eval", "total"}
        # the demo runs in token-in mode: Pi's call after the tool result continues the first, exactly
        assert row["stats"]["token_in_calls"] >= 1 and row["stats"]["traces"] == 1 and row["stats"]["drift_tokens"] == 0

    import datasets

    parquet = datasets.load_dataset("parquet", data_files=str(tmp_path / "corpus.parquet"), split="train")
    jsonl = datasets.load_dataset("json", data_files=str(tmp_path / "corpus.jsonl"), split="train")
    assert parquet.num_rows == jsonl.num_rows == instances
    assert sorted(parquet["instance_id"]) == sorted(r["instance_id"] for r in corpus)
    assert parquet[0]["messages"][0]["role"] in ("system", "user")
    summary_file = json.loads((tmp_path / "summary.json").read_text())
    assert summary_file["accepted"] == instances and summary_file["by_harness"]

    # the same command again has nothing left to do
    again = generate(tmp_path)
    assert again["attempts"] == instances and len(rows(tmp_path / "corpus.jsonl")) == instances


def test_noop_rejects_every_attempt(tmp_path: Path, docker_client: Any, instances: int) -> None:
    summary = generate(tmp_path, "engine.kind=noop")
    assert summary["attempts"] == instances and summary["accepted"] == 0
    assert rows(tmp_path / "corpus.jsonl") == [] and not (tmp_path / "corpus.parquet").exists()
    rejects = rows(tmp_path / "rejects.jsonl")
    assert len(rejects) == instances
    for row in rejects:
        # noop changes nothing: graded unresolved, and the reason says why (no patch), before the grade
        assert row["accepted"] is False and row["reward"] == 0.0 and row["reason"].startswith("no_patch:")
        assert row["eval"]["resolved"] is False
        assert row["patch"] == "" and row["stats"]["model_calls"] >= 1


def test_kill_9_mid_run_then_resume(tmp_path: Path, docker_client: Any, instances: int) -> None:
    corpus = tmp_path / "corpus.jsonl"
    proc = subprocess.Popen(
        [*command(tmp_path), "--no-progress"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + TIMEOUT
    while len(complete_lines(corpus)) < 2:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "no rows appeared"
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 1.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = complete_lines(corpus)
    assert 2 <= len(before) < instances, "kill the run earlier: it had (nearly) finished"

    summary = generate(tmp_path)
    after = complete_lines(corpus)
    assert after[: len(before)] == before  # every row written before the kill, byte for byte, in place
    keys = [json.loads(line)["key"] for line in after]
    assert len(keys) == len(set(keys)) == instances  # no duplicate, none missing, none truncated
    assert summary["accepted"] == instances and summary["segments"] == 2
    # the killed run's containers were swept by the rerun
    owners = [
        c["Labels"].get(OWNER_LABEL, "")
        for c in docker_client.api.containers(all=True, filters={"label": f"{MANAGED_LABEL}=1"})
    ]
    assert not [o for o in owners if f":{proc.pid}:" in o]


def test_ctrl_c_stops_cleanly_and_the_run_resumes(tmp_path: Path, docker_client: Any, instances: int) -> None:
    corpus = tmp_path / "corpus.jsonl"
    proc = subprocess.Popen(
        [*command(tmp_path), "--no-progress"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # a terminal's Ctrl-C: SIGINT with Python's default handling (a background shell job would ignore it)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + TIMEOUT
    while not complete_lines(corpus):
        assert proc.poll() is None and time.monotonic() < deadline, "no row appeared"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert b"interrupted" in err
    # the process removed its own containers (no sweep has run since)
    owned = docker_client.api.containers(all=True, filters={"label": f"{MANAGED_LABEL}=1"})
    assert not [c for c in owned if f":{proc.pid}:" in c["Labels"].get(OWNER_LABEL, "")]
    state = [json.loads(line) for line in complete_lines(tmp_path / "state.jsonl")]
    assert state[-1]["type"] == "segment_end" and state[-1]["interrupted"] is True
    interrupted = json.loads((tmp_path / "summary.json").read_text())
    assert 1 <= interrupted["attempts"] < instances and interrupted["pending"] == instances - interrupted["attempts"]

    summary = generate(tmp_path)
    assert summary["accepted"] == instances and len(rows(corpus)) == instances

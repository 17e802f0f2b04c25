"""`polar run` end to end, as a user runs it: the gold engine through real Pi on a demo instance, a JSON result, the
container gone. It drives the one harness session (`harness.session.run_session`) through the ad-hoc path
(`node.adhoc`, `node.local`) that no other test exercises as a whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from polar_cli.runtime.base import MANAGED_LABEL
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.swe.images import InstanceImageBuild

DEMO_MANIFEST = Path(__file__).resolve().parents[3] / "recipes" / "demo" / "instances.jsonl"
INSTANCE = "polar-demo__textkit-19"


def test_polar_run_gold_through_pi(
    tmp_path: Path, demo_images: list[InstanceImageBuild], docker_runtime: DockerRuntime
) -> None:
    argv = [sys.executable, "-m", "polar_cli", "run", "--harness", "pi", "--engine", "gold"]
    argv += [
        "--instance",
        INSTANCE,
        "--manifest",
        str(DEMO_MANIFEST),
        "--out",
        str(tmp_path / "run"),
        "--timeout",
        "300",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert (result["status"], result["harness"], result["engine"], result["instance_id"]) == (
        "ok",
        "pi",
        "gold",
        INSTANCE,
    )
    # the gold engine answered the harness twice (the patch through its shell tool, then a final message), with ids
    assert result["model_calls"] == result["model_calls_with_tokens"] >= 2
    assert result["patch"].startswith("diff --git") and result["error"] is None
    assert {"create", "init", "run", "postrun", "prepare", "wall"} <= set(result["timings"])
    assert (tmp_path / "run" / "artifacts" / "harness-output.log").is_file()
    leftover = docker_runtime.client.api.containers(
        all=True, filters={"label": [f"{MANAGED_LABEL}=1", f"polar.session={result['session_id']}"]}
    )
    assert leftover == []


def test_polar_run_usage_error_exits_2_with_one_error_line() -> None:
    argv = [
        sys.executable,
        "-m",
        "polar_cli",
        "run",
        "--harness",
        "pi",
        "--engine",
        "gold",
        "--image",
        "x",
        "--instruction",
        "y",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: --engine gold applies an instance's reference patch")

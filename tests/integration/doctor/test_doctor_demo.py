"""`polar doctor recipes/demo.yaml --json` for real: the local Docker engine, the images scripts/setup-docker builds,
and an engine URL on a closed port. A missing engine fails, never skips (run scripts/setup-docker)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "recipes" / "demo.yaml"


def doctor(out: Path, *overrides: str) -> tuple[int, dict[str, dict[str, Any]]]:
    argv = [sys.executable, "-m", "polar_cli", "doctor", str(RECIPE), *overrides, "--out", str(out), "--json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    result = json.loads(done.stdout)
    checks = {c["name"]: c for c in result["checks"]}
    # the exit code is the JSON's verdict: 1 exactly when some check failed
    assert done.returncode == (0 if result["ok"] else 1) and result["ok"] == all(
        c["status"] != "fail" for c in checks.values()
    )
    return done.returncode, checks


def test_the_demo_recipe_finds_docker_and_every_image_it_needs(tmp_path: Path) -> None:
    _, checks = doctor(tmp_path)
    assert checks["docker"]["status"] == "ok", checks["docker"]
    assert checks["docker"]["detail"].startswith("Docker ")
    images = [n for n in checks if n == "base-image" or n.startswith(("bundle:", "instance:"))]
    assert "bundle:pi" in images and sum(n.startswith("instance:") for n in images) == 3, images
    assert {n: checks[n]["status"] for n in images} == dict.fromkeys(images, "ok")
    assert checks["manifest"]["status"] == checks["engine"]["status"] == checks["tokenizer"]["status"] == "ok"


def test_an_engine_url_on_a_closed_port_fails_the_engine_check_and_exits_1(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    code, checks = doctor(tmp_path, "engine.kind=vllm", f"engine.url={url}")
    assert code == 1
    assert checks["engine"]["status"] == "fail" and "unreachable" in checks["engine"]["detail"], checks["engine"]
    assert "engine-tokens" not in checks
    assert checks["docker"]["status"] == "ok" and checks["bundle:pi"]["status"] == "ok"

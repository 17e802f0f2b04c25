"""`polar doctor [RECIPE] [KEY=VALUE ...] [--json]`: a line per check, exit 0 unless one failed, 2 for a bad recipe."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import certifi
import pytest
from typer.testing import CliRunner

from polar_cli import cli
from polar_cli.doctor import Check, report
from polar_cli.doctor.checks import HasImage
from polar_cli.runtime.bootstrap import BaseRecipe
from polar_cli.runtime.images import harness_image_plan, image_names, relay_image_plan
from polar_cli.swe.manifest import load_manifest
from tests.support.fake_runtime import FakeRuntime

ROOT = Path(__file__).resolve().parents[3]
DEMO = str(ROOT / "recipes" / "demo.yaml")
KEYS = ["name", "status", "detail", "fix"]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.build_app(), ["doctor", *args])
    return result.exit_code, result.output


@pytest.fixture(autouse=True)
def steady_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CA bundle that loads and no disk floor, whatever this machine has."""
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
    monkeypatch.setattr(report, "min_free_gb", lambda recipe: 0.0)
    monkeypatch.delenv("POLAR_BASE_IMAGE", raising=False)
    monkeypatch.delenv("POLAR_IMAGE_PREFIX", raising=False)


def fake_docker(monkeypatch: pytest.MonkeyPatch, images: set[str]) -> None:
    def docker_check() -> tuple[Check, HasImage | None]:
        return Check("docker", "ok", "fake engine"), FakeRuntime(images=set(images)).image_exists

    monkeypatch.setattr(report, "docker_check", docker_check)


def demo_images() -> set[str]:
    instances = {str(i.image) for i in load_manifest(ROOT / "recipes" / "demo" / "instances.jsonl")}
    return {image_names().base(BaseRecipe()), harness_image_plan("pi").tag, relay_image_plan().tag, *instances}


def test_no_docker_engine_fails_with_exit_1_and_the_json_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    code, output = invoke(DEMO, "--out", str(tmp_path / "run"), "--json")
    assert code == 1, output
    result = json.loads(output)
    assert list(result) == ["ok", "counts", "checks"] and result["ok"] is False
    assert all(list(c) == KEYS for c in result["checks"])
    by_name = {c["name"]: c for c in result["checks"]}
    assert by_name["docker"]["status"] == "fail" and by_name["docker"]["fix"]
    assert by_name["images"]["status"] == "warn"
    assert {by_name[n]["status"] for n in ("manifest", "engine", "tokenizer", "disk", "ca-bundle")} == {"ok"}
    assert result["counts"] == {s: sum(c["status"] == s for c in result["checks"]) for s in ("ok", "warn", "fail")}


def test_a_ready_demo_recipe_exits_0_one_line_per_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_docker(monkeypatch, demo_images())
    code, output = invoke(DEMO, "--out", str(tmp_path))
    assert code == 0, output
    lines = output.strip().splitlines()
    assert lines[-1].endswith("0 warning(s), 0 failure(s)")
    names = [line.split()[1] for line in lines[:-1]]
    assert names[:4] == ["docker", "manifest", "base-image", "bundle:pi"]
    assert names[-4:] == ["engine", "tokenizer", "disk", "ca-bundle"]
    assert all(line.startswith("ok  ") for line in lines[:-1])


def test_overrides_apply_and_a_closed_engine_port_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_docker(monkeypatch, demo_images())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    code, output = invoke(DEMO, "engine.kind=vllm", f"engine.url={url}", "--out", str(tmp_path), "--json")
    assert code == 1, output
    [engine] = [c for c in json.loads(output)["checks"] if c["name"] == "engine"]
    assert engine["status"] == "fail" and url in engine["detail"] and "engine.url" in engine["fix"]


def test_warnings_alone_exit_0(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_docker(monkeypatch, set())
    code, output = invoke("--out", str(tmp_path), "--json")
    assert code == 0, output
    result = json.loads(output)
    assert result["ok"] is True and result["counts"]["warn"] >= 2
    # the demo recipe with nothing built: the run would build it all (warnings) ...
    assert invoke(DEMO, "--out", str(tmp_path))[0] == 0
    # ... unless it may not build
    code, output = invoke(DEMO, "runtime.build_images=false", "--out", str(tmp_path))
    assert code == 1 and "fail  bundle:pi" in output and "polar images build harness pi" in output


def test_a_bad_recipe_or_an_override_without_one_is_a_usage_error(tmp_path: Path) -> None:
    code, output = invoke(DEMO, "engine.kind=soap")
    assert code == 2 and output.startswith("error:") and "engine.kind" in output
    code, output = invoke(str(tmp_path / "missing.yaml"))
    assert code == 2 and output.startswith("error:")
    code, output = invoke("--out", str(tmp_path), "--json", "engine.kind=noop")
    assert code == 2 and "overrides need a recipe" in output

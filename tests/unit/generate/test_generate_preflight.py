"""`polar generate` runs `polar doctor`'s preflight before it starts anything: a failing check is the one error line
the command exits 1 with, and no container, engine or run state is touched beyond the run directory."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from polar_cli.config import load_recipe
from polar_cli.errors import PolarError
from polar_cli.generate.run import PreflightFailed, generate
from polar_cli.runtime.bootstrap import BaseRecipe
from polar_cli.runtime.images import harness_image_plan, image_names, relay_image_plan
from polar_cli.swe.manifest import load_manifest
from tests.support.fake_runtime import FakeRuntime

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "recipes" / "demo.yaml"


def demo_runtime() -> FakeRuntime:
    instances = {str(i.image) for i in load_manifest(ROOT / "recipes" / "demo" / "instances.jsonl")}
    return FakeRuntime(
        images={image_names().base(BaseRecipe()), harness_image_plan("pi").tag, relay_image_plan().tag, *instances}
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_too_little_free_disk_stops_the_run_before_any_container(tmp_path: Path) -> None:
    runtime = demo_runtime()
    recipe = load_recipe(DEMO, ["runtime.min_free_gb=1000000"])
    with pytest.raises(PreflightFailed, match=r"^fail\s+disk .* \(polar doctor shows every check\)$"):
        generate(recipe, tmp_path / "run", live=False, runtime_factory=lambda: runtime)
    assert runtime.started == [] and runtime.builds == []
    assert not (tmp_path / "run" / "corpus.jsonl").read_bytes()


def test_an_engine_url_that_does_not_answer_stops_the_run(tmp_path: Path) -> None:
    runtime = demo_runtime()
    recipe = load_recipe(DEMO, ["engine.kind=vllm", f"engine.url=http://127.0.0.1:{closed_port()}"])
    with pytest.raises(PreflightFailed, match=r"^fail\s+engine .*unreachable") as caught:
        generate(recipe, tmp_path / "run", live=False, runtime_factory=lambda: runtime)
    assert isinstance(caught.value, PolarError) and "\n" not in str(caught.value)  # one `error:` line, exit 1
    assert runtime.started == []


def test_a_run_that_passes_preflight_is_not_stopped(tmp_path: Path) -> None:
    runtime = demo_runtime()
    recipe = load_recipe(DEMO, ["runtime.min_free_gb=0", "manifest.limit=1", "engine.kind=noop"])
    outcome = generate(recipe, tmp_path / "run", live=False, runtime_factory=lambda: runtime)
    assert runtime.started and not outcome.interrupted  # its session ran (the fake's grading ends it as an error)

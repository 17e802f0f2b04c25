"""`preflight`: only the failures that must stop `polar generate` before it starts anything; and `diagnose`'s order."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from polar_cli.config import load_recipe
from polar_cli.doctor import Check, diagnose, preflight, report
from polar_cli.doctor.checks import HasImage
from polar_cli.runtime.bootstrap import BaseRecipe
from polar_cli.runtime.images import harness_image_plan, image_names, relay_image_plan
from polar_cli.swe.manifest import load_manifest
from tests.support.fake_runtime import FakeRuntime

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "recipes" / "demo.yaml"


def demo_images() -> set[str]:
    instances = {str(i.image) for i in load_manifest(ROOT / "recipes" / "demo" / "instances.jsonl")}
    return {image_names().base(BaseRecipe()), harness_image_plan("pi").tag, relay_image_plan().tag, *instances}


def fake_engine(monkeypatch: pytest.MonkeyPatch, images: set[str] | None) -> None:
    """docker_check answered by a fake runtime holding ``images`` (None: no engine answers)."""

    def fake_docker_check() -> tuple[Check, HasImage | None]:
        if images is None:
            return Check("docker", "fail", "no engine", "start one"), None
        return Check("docker", "ok", "fake"), FakeRuntime(images=set(images)).image_exists

    monkeypatch.setattr(report, "docker_check", fake_docker_check)


def closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def disk_floor(monkeypatch: pytest.MonkeyPatch, gb: float) -> None:
    """The run's ``runtime.min_free_gb``, whatever the recipe (or the default) says."""
    monkeypatch.setattr(report, "min_free_gb", lambda recipe: gb)


@pytest.fixture(autouse=True)
def no_disk_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    disk_floor(monkeypatch, 0.0)


def test_a_ready_run_has_nothing_to_stop_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_engine(monkeypatch, demo_images())
    assert preflight(load_recipe(DEMO, ["runtime.build_images=false"]), tmp_path) == []


def test_missing_images_stop_a_run_only_when_it_cannot_build_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    images = demo_images() - {harness_image_plan("pi").tag, "polar-demo/textkit:0.3"}
    fake_engine(monkeypatch, images)
    assert preflight(load_recipe(DEMO), tmp_path) == []  # built at start: warnings, not failures
    found = preflight(load_recipe(DEMO, ["runtime.build_images=false"]), tmp_path)
    assert [(c.name, c.status) for c in found] == [("bundle:pi", "fail"), ("instance:polar-demo/textkit:0.3", "fail")]


def test_a_run_can_give_its_own_runtime_and_selection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_engine(monkeypatch, None)  # never asked: the run's runtime answers
    runtime = FakeRuntime(images=demo_images() - {"polar-demo/csvsift:1.2"})
    recipe = load_recipe(DEMO, ["runtime.build_images=false"])
    instances = load_manifest(ROOT / "recipes" / "demo" / "instances.jsonl")
    found = preflight(recipe, tmp_path, has_image=runtime.image_exists)
    assert [c.name for c in found] == ["instance:polar-demo/csvsift:1.2"]
    textkit = [i for i in instances if i.image == "polar-demo/textkit:0.3"]
    assert preflight(recipe, tmp_path, instances=textkit, has_image=runtime.image_exists) == []


def test_no_docker_an_unreachable_engine_and_a_full_disk_stop_a_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_engine(monkeypatch, None)
    disk_floor(monkeypatch, 10.0**9)
    recipe = load_recipe(DEMO, ["engine.kind=vllm", f"engine.url={closed_url()}"])
    found = preflight(recipe, tmp_path)
    assert [c.name for c in found] == ["docker", "engine", "disk"]
    assert all(c.status == "fail" and c.fix for c in found)


def test_preflight_leaves_what_only_warns_or_costs_time_to_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_engine(monkeypatch, demo_images())
    # a tokenizer that does not load is the engine's own start-up error, and a launched SGLang is not probed
    recipe = load_recipe(DEMO, [f"engine.tokenizer={tmp_path}", "manifest.limit=0"])
    assert preflight(recipe, tmp_path) == []
    assert any(c.name == "tokenizer" and c.status == "fail" for c in diagnose(recipe, tmp_path))


def test_diagnose_without_a_recipe_lists_every_builtin_bundle_as_a_warning_at_most(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from polar_cli.harness import ADAPTERS

    fake_engine(monkeypatch, set())
    found = diagnose(None, tmp_path)
    names = [c.name for c in found]
    assert names == ["docker", "base-image", *(f"bundle:{n}" for n in ADAPTERS), "relay", "disk", "ca-bundle"]
    assert {c.status for c in found if c.name.startswith("bundle:")} == {"warn"}
    fake_engine(monkeypatch, None)
    assert [c.name for c in diagnose(None, tmp_path)] == ["docker", "images", "disk", "ca-bundle"]


def test_a_line_and_the_json_report() -> None:
    found = [Check("docker", "ok", "Docker 1"), Check("disk", "fail", "0 GB free", "free space")]
    assert report.line(found[1]) == f"fail  {'disk':<16}  0 GB free  -> free space"
    assert report.line(found[0], lambda s: f"<{s}>") == f"<ok  >  {'docker':<16}  Docker 1"
    shape = report.as_json(found)
    assert shape == {
        "ok": False,
        "counts": {"ok": 1, "warn": 0, "fail": 1},
        "checks": [
            {"name": "docker", "status": "ok", "detail": "Docker 1", "fix": None},
            {"name": "disk", "status": "fail", "detail": "0 GB free", "fix": "free space"},
        ],
    }
    assert report.as_json(found[:1])["ok"] is True

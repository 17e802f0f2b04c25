from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from polar_cli.errors import ConfigError, RuntimeFailure
from polar_cli.runtime.images import split_image
from polar_cli.swe.images import _build_groups, build_context, ensure_image, instance_image
from polar_cli.swe.manifest import BuildSpec, Instance
from tests.support.fake_runtime import FakeRuntime


def instance(instance_id: str = "getmoto__moto-7365", **fields: Any) -> Instance:
    defaults: dict[str, Any] = {
        "repo": "getmoto/moto",
        "base_commit": "a" * 40,
        "problem_statement": "",
        "patch": "",
        "test_patch": "",
        "fail_to_pass": (),
        "pass_to_pass": (),
        "version": "5.0",
    }
    return Instance(instance_id=instance_id, **{**defaults, **fields})


def test_swe_gym_convention() -> None:
    assert instance_image(instance(), "swe-gym") == "docker.io/xingyaoww/sweb.eval.x86_64.getmoto_s_moto-7365:latest"
    assert (
        instance_image(instance("Project-MONAI__MONAI-3403"), "swe-gym")
        == "docker.io/xingyaoww/sweb.eval.x86_64.project-monai_s_monai-3403:latest"
    )


def test_swe_bench_convention() -> None:
    assert (
        instance_image(instance("django__django-11099"), "swe-bench")
        == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    )


def test_custom_template_and_row_image() -> None:
    assert instance_image(instance(), "registry.local/{repo}:{version}-{instance_id}") == (
        "registry.local/getmoto/moto:5.0-getmoto__moto-7365"
    )
    assert instance_image(instance(image="mine:1"), "swe-gym") == "mine:1"


def test_no_image_and_no_template_names_the_instance() -> None:
    with pytest.raises(ConfigError, match="instance getmoto__moto-7365: image: missing"):
        instance_image(instance())
    with pytest.raises(ConfigError, match=re.escape("image template '{nope}'")):
        instance_image(instance(), "{nope}")


@pytest.mark.parametrize(
    ("image", "parts"),
    [
        ("polar-demo/textkit:0.3", ("polar-demo/textkit", "0.3")),
        ("ubuntu", ("ubuntu", "latest")),
        ("localhost:5000/x", ("localhost:5000/x", "latest")),
        ("localhost:5000/x:1", ("localhost:5000/x", "1")),
    ],
)
def test_split_image(image: str, parts: tuple[str, str]) -> None:
    assert split_image(image) == parts


def test_present_image_is_fine() -> None:
    runtime = FakeRuntime(images={"a:1"})
    ensure_image(runtime, "a:1")
    assert runtime.pulls == []


def test_absent_image_is_pulled_when_possible() -> None:
    runtime = FakeRuntime(images=set(), pull_error=None)
    ensure_image(runtime, "reg/a:1")
    assert runtime.pulls == ["reg/a:1"]


def test_absent_image_that_cannot_be_pulled_is_named() -> None:
    runtime = FakeRuntime(images=set(), pull_error=RuntimeFailure("registry unreachable"))
    with pytest.raises(
        RuntimeFailure,
        match=r"image reg/a:1 is not present and cannot be pulled \(pulling it failed: registry unreachable\)",
    ):
        ensure_image(runtime, "reg/a:1")
    with pytest.raises(RuntimeFailure, match="image b:2 is not present and cannot be pulled"):
        ensure_image(FakeRuntime(images=set()), "b:2")


def test_build_context_applies_dockerignore(tmp_path: Path) -> None:
    (tmp_path / "repos/x/pkg/__pycache__").mkdir(parents=True)
    (tmp_path / "repos/x/pkg/a.py").write_text("a")
    (tmp_path / "repos/x/pkg/__pycache__/a.cpython-311.pyc").write_text("junk")
    (tmp_path / "repos/x/.pytest_cache").mkdir()
    (tmp_path / "repos/x/.pytest_cache/v").write_text("junk")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes/n.md").write_text("n")
    (tmp_path / "images").mkdir()
    (tmp_path / "images/Dockerfile.demo").write_text("FROM scratch\n")
    (tmp_path / ".dockerignore").write_text("# comment\nnotes/\n**/.pytest_cache\n")
    files = build_context(BuildSpec(tmp_path, "images/Dockerfile.demo"))
    assert sorted(files) == [".dockerignore", "Dockerfile", "images/Dockerfile.demo", "repos/x/pkg/a.py"]
    assert files["Dockerfile"] == b"FROM scratch\n"
    with pytest.raises(ConfigError, match=re.escape("Dockerfile.other not found")):
        build_context(BuildSpec(tmp_path, "Dockerfile.other"))


def test_build_groups_share_one_image_and_refuse_conflicts(tmp_path: Path) -> None:
    spec = BuildSpec(tmp_path, "Dockerfile", {"REPO": "x"})
    rows = [instance("o__x-1", image="o/x:1", build=spec), instance("o__x-2", image="o/x:1", build=spec), instance()]
    assert _build_groups(rows) == {"o/x:1": (spec, ["o__x-1", "o__x-2"])}
    other = BuildSpec(tmp_path, "Dockerfile", {"REPO": "y"})
    with pytest.raises(ConfigError, match="instance o__x-3: build: differs from instance o__x-1's build of o/x:1"):
        _build_groups([*rows, instance("o__x-3", image="o/x:1", build=other)])
    with pytest.raises(ConfigError, match="instance o__x-4: build: given, but the row names no image"):
        _build_groups([instance("o__x-4", build=spec)])

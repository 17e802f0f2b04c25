"""Image names, content digests and the pinned harness versions (no engine needed)."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest

from polar_cli.errors import RuntimeFailure
from polar_cli.runtime.bootstrap import BaseRecipe
from polar_cli.runtime.images import (
    HARNESSES,
    ImageNames,
    bundle_container_name,
    context_digest,
    context_files,
    harness_image_plan,
    harness_images_dir,
    harness_version,
    image_names,
    on_base_plan,
    requirement_pin,
    tar_context,
    toolchain,
)

PINNED = {
    "claude-code": "2.1.332",
    "codex": "0.171.0",
    "qwen-code": "0.24.4",
    "gemini-cli": "0.61.0",
    "pi": "0.73.1",
    "mini-swe-agent": "2.4.6",
    "aider": "0.86.2",
    "hermes": "0.19.0",
    "opencode": "1.18.33",
    "cline": "3.0.65",
    "openhands": "1.58.2",
    "openclaw": "2026.9.6",
    "kilo": "7.7.7",
    "terminus-2": "0.26.0",
}


def test_pinned_harness_versions() -> None:
    assert {name: harness_version(name) for name in HARNESSES} == PINNED


def test_unknown_harness_is_refused() -> None:
    with pytest.raises(RuntimeFailure, match="unknown harness 'crush'"):
        harness_version("crush")


def test_every_bundle_dockerfile_builds_on_the_local_images_only() -> None:
    for name in (*HARNESSES, "node", "python", "python-trixie"):
        dockerfile = (harness_images_dir() / name / "Dockerfile").read_text()
        froms = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM ")]
        allowed = {"${BASE_IMAGE}", "${NODE_IMAGE}", "${PYTHON_IMAGE}", "${PYTHON_TRIXIE_IMAGE}"}
        assert froms and set(froms) <= allowed, (name, froms)


def test_each_bundle_has_one_toolchain() -> None:
    kinds = {name: toolchain(name) for name in HARNESSES}
    assert {n for n, k in kinds.items() if k == "python"} == {"mini-swe-agent", "aider", "hermes"}
    # the OpenHands SDK and harbor (Terminus-2) need Python >= 3.12: bookworm has 3.11, trixie 3.13
    assert {n for n, k in kinds.items() if k == "python-trixie"} == {"openhands", "terminus-2"}
    python = {"mini-swe-agent", "aider", "hermes", "openhands", "terminus-2"}
    assert all(k == "node" for n, k in kinds.items() if n not in python)


def test_digest_ignores_order_and_follows_content_names_and_parents() -> None:
    files = {"Dockerfile": b"FROM x\n", "a/b.txt": b"b"}
    digest = context_digest(files, {"BASE_IMAGE": "base:1"})
    assert digest == context_digest(dict(reversed(list(files.items()))), {"BASE_IMAGE": "base:1"})
    variants = [
        context_digest({**files, "a/b.txt": b"c"}, {"BASE_IMAGE": "base:1"}),
        context_digest({"Dockerfile": b"FROM x\n", "a/c.txt": b"b"}, {"BASE_IMAGE": "base:1"}),
        context_digest(files, {"BASE_IMAGE": "base:2"}),
        context_digest(files, {}),
    ]
    assert len({digest, *variants}) == 5


def test_tar_context_holds_exactly_the_files() -> None:
    data = tar_context({"Dockerfile": b"FROM x\n", "dir/f": b"\x00\x01"})
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert got == {"Dockerfile": b"FROM x\n", "dir/f": b"\x00\x01"}


def test_context_files_skip_caches(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert context_files(tmp_path) == {"Dockerfile": b"FROM x\n"}
    with pytest.raises(RuntimeFailure, match="no build context"):
        context_files(tmp_path / "absent")


def test_image_names_from_the_environment() -> None:
    names = image_names({"POLAR_IMAGE_PREFIX": "registry.example:5000/team/polar"})
    recipe = BaseRecipe()
    assert names.base(recipe) == f"registry.example:5000/team/polar/base:bookworm-{recipe.digest()}"
    assert names.harness("pi", "0.73.1", "abc") == "registry.example:5000/team/polar/harness-pi:0.73.1-abc"
    assert image_names({"POLAR_BASE_IMAGE": "debian:bookworm"}).base(recipe) == "debian:bookworm"
    assert image_names({}) == ImageNames()


def test_plans_follow_the_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(harness_images_dir(), tmp_path / "harness_images")
    monkeypatch.setenv("POLAR_HARNESS_IMAGES_DIR", str(tmp_path / "harness_images"))
    names = ImageNames()
    before = {name: harness_image_plan(name, names).tag for name in HARNESSES}
    node_before = on_base_plan("node", names).tag
    assert before["codex"].startswith("polar/harness-codex:0.171.0-")
    assert harness_image_plan("codex", names).buildargs["NODE_IMAGE"] == node_before

    with (tmp_path / "harness_images/codex/Dockerfile").open("a") as fh:
        fh.write("# changed\n")
    after = {name: harness_image_plan(name, names).tag for name in HARNESSES}
    assert after["codex"] != before["codex"]
    assert {n: t for n, t in after.items() if n != "codex"} == {n: t for n, t in before.items() if n != "codex"}

    # a change below every bundle (the node toolchain) renames them all
    (tmp_path / "harness_images/node/make-bundle").write_text("#!/bin/sh\n")
    assert on_base_plan("node", names).tag != node_before
    node_harnesses = [n for n in HARNESSES if toolchain(n) == "node"]
    assert all(harness_image_plan(n, names).tag != after[n] for n in node_harnesses)

    # the Python toolchain is below the Python bundles only
    python_before = on_base_plan("python", names).tag
    assert harness_image_plan("aider", names).buildargs == {
        "BASE_IMAGE": names.base(BaseRecipe()),
        "PYTHON_IMAGE": python_before,
    }
    renamed = {name: harness_image_plan(name, names).tag for name in HARNESSES}
    (tmp_path / "harness_images/python/make-pybundle").write_text("#!/bin/sh\n")
    assert on_base_plan("python", names).tag != python_before
    for name in HARNESSES:
        changed = harness_image_plan(name, names).tag != renamed[name]
        assert changed == (toolchain(name) == "python"), name

    # the trixie toolchain is below its own bundles only
    trixie_before = on_base_plan("python-trixie", names).tag
    assert trixie_before.startswith("polar/python-trixie:")
    assert harness_image_plan("openhands", names).buildargs == {
        "BASE_IMAGE": names.base(BaseRecipe()),
        "PYTHON_TRIXIE_IMAGE": trixie_before,
    }
    renamed = {name: harness_image_plan(name, names).tag for name in HARNESSES}
    (tmp_path / "harness_images/python-trixie/make-pybundle").write_text("#!/bin/sh\n")
    assert on_base_plan("python-trixie", names).tag != trixie_before
    for name in HARNESSES:
        changed = harness_image_plan(name, names).tag != renamed[name]
        assert changed == (toolchain(name) == "python-trixie"), name


@pytest.mark.parametrize(
    ("text", "pin"),
    [
        ("aider-chat==0.86.2\n", "0.86.2"),
        ("# the harness\n--only-binary :all:\nmini-swe-agent==2.4.6  # pinned\n", "2.4.6"),
        ("a==1\nb==2\n", None),
        ("aider-chat>=0.86\n", None),
        ("", None),
    ],
)
def test_a_python_bundle_pins_exactly_one_package(text: str, pin: str | None) -> None:
    assert requirement_pin(text) == pin


def test_bundle_container_name_carries_the_image_digest() -> None:
    name = bundle_container_name("registry.example:5000/polar/harness-pi:0.73.1-abcdef")
    assert name == "polar-bundle-harness-pi-0.73.1-abcdef"

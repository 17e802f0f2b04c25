"""Docker fixtures for the SWE tier: the demo images are built once per session (content-addressed, so a run with
unchanged sources only re-tags them). No engine or no base image is an error here, never a skip: CI runs this tier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from polar_cli.runtime.docker import DockerRuntime
from polar_cli.swe.images import InstanceImageBuild, build_instance_images

DEMO_MANIFEST = Path(__file__).resolve().parents[3] / "recipes" / "demo" / "instances.jsonl"


@pytest.fixture(scope="session")
def docker_runtime() -> Iterator[DockerRuntime]:
    with DockerRuntime() as runtime:
        yield runtime


@pytest.fixture(scope="session")
def demo_images(docker_runtime: DockerRuntime) -> list[InstanceImageBuild]:
    lines: list[str] = []
    builds = build_instance_images(DEMO_MANIFEST, docker_runtime, log=lines.append)
    for build in builds:
        assert docker_runtime.image_exists(build.image), f"{build.image} missing after the build:\n" + "\n".join(lines)
    return builds

"""Docker, the base image and every harness bundle, shared by the whole session; missing ones fail loudly.

CI builds everything first (scripts/setup-docker, from scripts/setup-tests); a test here never builds an image, so a
missing engine or image is a setup failure to fix, never a skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from polar_cli.errors import RuntimeFailure
from polar_cli.runtime.base import MANAGED_LABEL, OWNER_LABEL
from polar_cli.runtime.bootstrap import BaseRecipe
from polar_cli.runtime.docker import DockerRuntime, connect
from polar_cli.runtime.images import (
    HARNESSES,
    ensure_bundle_container,
    harness_image_plan,
    image_exists,
    image_names,
)

SETUP_HINT = "run scripts/setup-docker (it starts the engine and builds the images)"


@pytest.fixture(scope="session")
def docker_client() -> Any:
    try:
        return connect(timeout=600)
    except RuntimeFailure as exc:
        pytest.fail(f"{exc}; {SETUP_HINT}")


@pytest.fixture(scope="session")
def runtime(docker_client: Any) -> Iterator[DockerRuntime]:
    """One runtime for every test; at the end no container it started may still exist."""
    with DockerRuntime(docker_client) as rt:
        yield rt
        leftover = owned_containers(docker_client, rt.owner)
    assert rt.live() == [], f"containers still tracked: {rt.live()}"
    assert leftover == [], f"containers left behind: {leftover}"


def owned_containers(client: Any, owner: str) -> list[str]:
    found = client.api.containers(all=True, filters={"label": [f"{MANAGED_LABEL}=1", f"{OWNER_LABEL}={owner}"]})
    return [str(c["Names"][0]).lstrip("/") for c in found]


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    tag = image_names().base(BaseRecipe())
    if not image_exists(docker_client, tag):
        pytest.fail(f"base image {tag} is missing; {SETUP_HINT}")
    return tag


@pytest.fixture(scope="session")
def bundles(docker_client: Any) -> dict[str, str]:
    """Harness name -> its bundle data container (created from the current bundle image when needed)."""
    out = {}
    for name in HARNESSES:
        tag = harness_image_plan(name).tag
        if not image_exists(docker_client, tag):
            pytest.fail(f"harness bundle {tag} is missing (or out of date); {SETUP_HINT}")
        out[name] = ensure_bundle_container(docker_client, tag)
    return out

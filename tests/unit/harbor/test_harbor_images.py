"""The FROM mapping table and the content-addressed tag of a Harbor task's image."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from polar_cli.config import parse_recipe
from polar_cli.errors import ConfigError
from polar_cli.harbor.config import DEFAULT_BASE_IMAGES
from polar_cli.harbor.images import map_dockerfile, mapped_image, task_image
from polar_cli.harbor.tasks import load_task

ROOT = Path(__file__).resolve().parents[3]
BASE = "polar/base:bookworm-0123"


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("debian:bookworm-slim", BASE),
        ("debian:bookworm", BASE),
        ("docker.io/library/debian:bookworm-slim", BASE),
        ("ubuntu:24.04", "ubuntu:24.04"),  # not in the default table: built FROM as written
        ("debian:bookworm-slim@sha256:abc", "debian:bookworm-slim@sha256:abc"),
    ],
)
def test_the_default_table_maps_debian_bookworm_to_the_base(image: str, expected: str) -> None:
    assert mapped_image(image, DEFAULT_BASE_IMAGES, BASE) == expected


def test_an_exact_key_wins_over_a_pattern_and_patterns_go_in_order() -> None:
    table = {"python:3.*": "mirror.example/python:3-any", "python:3.12-slim": "{base}", "python:*": "never"}
    assert mapped_image("python:3.12-slim", table, BASE) == BASE
    assert mapped_image("python:3.11", table, BASE) == "mirror.example/python:3-any"
    assert mapped_image("python:latest", table, BASE) == "never"
    assert mapped_image("node:20", table, BASE) == "node:20"


def test_every_from_is_mapped_and_the_rest_of_the_dockerfile_kept() -> None:
    text = (
        "# syntax=docker/dockerfile:1\r\n"
        "FROM --platform=linux/amd64 debian:bookworm-slim AS build\r\n"
        "RUN echo FROM debian:bookworm-slim\n"
        "from debian:bookworm\n"
        "FROM build\n"
        "COPY --from=build /x /y\n"
    )
    mapped = map_dockerfile(text, DEFAULT_BASE_IMAGES, BASE)
    assert mapped == (
        "# syntax=docker/dockerfile:1\r\n"
        f"FROM --platform=linux/amd64 {BASE} AS build\r\n"
        "RUN echo FROM debian:bookworm-slim\n"
        f"from {BASE}\n"
        "FROM build\n"
        "COPY --from=build /x /y\n"
    )
    assert map_dockerfile(text, {}, BASE) == text


def test_the_tag_follows_the_context_the_table_and_the_base(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "recipes" / "demo-terminal" / "top-words", tmp_path / "top-words")
    task = load_task(tmp_path / "top-words")
    first = task_image(task, DEFAULT_BASE_IMAGES, BASE)
    assert first.tag.startswith("polar-harbor/top-words:polar-")
    assert first.files is not None and first.files["Dockerfile"].decode().count(f"FROM {BASE}") == 1
    assert task_image(task, DEFAULT_BASE_IMAGES, BASE) == first
    assert task_image(task, DEFAULT_BASE_IMAGES, "polar/base:bookworm-other").tag != first.tag
    assert task_image(task, {}, BASE).tag != first.tag
    (task.environment / "files" / "corpus.txt").write_text("changed\n")
    assert task_image(task, DEFAULT_BASE_IMAGES, BASE).tag != first.tag


def test_the_recipe_sets_the_threshold_and_the_table() -> None:
    base = {"manifest": {"source": "tasks"}, "harnesses": ["pi"], "engine": {"kind": "gold", "tokenizer": "qwen3"}}
    recipe = parse_recipe(base)
    assert recipe.harbor.reward_threshold == 1.0 and recipe.harbor.base_images == DEFAULT_BASE_IMAGES
    recipe = parse_recipe(base, ["harbor.reward_threshold=0.5", "harbor.base_images={'ubuntu:*': '{base}'}"])
    assert recipe.harbor.reward_threshold == 0.5 and recipe.harbor.base_images == {"ubuntu:*": "{base}"}
    with pytest.raises(ConfigError, match=r"harbor\.threshold"):
        parse_recipe(base, ["harbor.threshold=1"])

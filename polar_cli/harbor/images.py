"""Harbor task images: environment/Dockerfile built locally, its FROM mapped through the recipe's table.

A task's image is ``polar-harbor/<task>:polar-<digest>``; the digest covers the build context as sent (the
Dockerfile after mapping) and the base image, so an unchanged task is never rebuilt and a changed one always is. A
FROM that the table names (exactly, or by a ``*`` pattern) is replaced by its target, ``{base}`` standing for Polar's
bootstrapped Debian base: a task written against a public registry builds here without one, and a deployment with
its own registry maps to that instead (`config.HarborConfig.base_images`). A task with only
``[environment].docker_image`` runs in that image as named.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass

from polar_cli.harbor.config import BASE
from polar_cli.harbor.tasks import HarborTask
from polar_cli.runtime.base import Log, Runtime

REPOSITORY = "polar-harbor"
_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE)


def mapped_image(image: str, table: Mapping[str, str], base: str) -> str:
    """``image`` through the table: an exact key first, then the first matching pattern; unchanged otherwise."""
    target = table.get(image)
    if target is None:
        target = next(
            (t for pattern, t in table.items() if "*" in pattern and fnmatch.fnmatchcase(image, pattern)), None
        )
    if target is None:
        return image
    return target.replace(BASE, base)


def map_dockerfile(text: str, table: Mapping[str, str], base: str) -> str:
    """The Dockerfile with each FROM image mapped (flags such as --platform and ``AS name`` kept)."""
    lines = []
    for line in text.splitlines(keepends=True):
        match = _FROM.match(line.rstrip("\r\n"))
        if match is not None:
            head, flags, image, rest = match.groups()
            ending = line[len(line.rstrip("\r\n")) :]
            line = f"{head}{flags}{mapped_image(image, table, base)}{rest}{ending}"
        lines.append(line)
    return "".join(lines)


@dataclass(frozen=True, slots=True)
class TaskImage:
    """What a task runs in: its tag, and the context to build it from (None: a prebuilt image, used as named)."""

    tag: str
    files: Mapping[str, bytes] | None


def _safe(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._") or "task"


def task_image(task: HarborTask, table: Mapping[str, str], base: str) -> TaskImage:
    """The image of ``task`` (its tag computed without building anything)."""
    from polar_cli.runtime.images import context_digest, context_files

    if not (task.environment / "Dockerfile").is_file():
        assert task.docker_image is not None  # load_task refuses a task with neither
        return TaskImage(task.docker_image, None)
    files = context_files(task.environment)
    files["Dockerfile"] = map_dockerfile(files["Dockerfile"].decode(), table, base).encode()
    return TaskImage(f"{REPOSITORY}/{_safe(task.name)}:polar-{context_digest(files, {'base': base})}", files)


def base_tag() -> str:
    """Polar's base image tag (known without Docker: it follows from the bootstrap recipe)."""
    from polar_cli.runtime.bootstrap import BaseRecipe
    from polar_cli.runtime.images import image_names

    return image_names().base(BaseRecipe())


def ensure_task_images(
    tasks: list[HarborTask], table: Mapping[str, str], runtime: Runtime, *, build: bool = True, log: Log = print
) -> dict[str, str]:
    """Task name -> image, building what is missing (the base bootstrapped first when a mapped FROM needs it)."""
    from polar_cli.swe.images import ensure_image

    base = base_tag()
    images: dict[str, str] = {}
    for task in tasks:
        image = task_image(task, table, base)
        images[task.name] = image.tag
        if image.files is None or runtime.image_exists(image.tag) or not build:
            ensure_image(runtime, image.tag)
            continue
        if base in image.files["Dockerfile"].decode():
            runtime.base_image(log=log)
        log(f"building {image.tag} for harbor task {task.name}")
        runtime.build(image.files, image.tag, log=log)
    return images

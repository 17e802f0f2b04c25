"""Which image an instance runs in, and building the images of manifests that say how.

An instance runs in its row's ``image``, else in the image an image-name template gives it. The public conventions
are built in by name: ``swe-gym`` and ``swe-bench`` (docs/design.md "Manifest row"); any other template is a format
string over ``instance_id``, ``swegym_id``, ``swebench_id``, ``repo`` and ``version``.

Rows may carry a build spec (``build: {context, dockerfile, args}``, paths relative to the manifest). Such an image
is built FROM the bootstrapped base (passed as the ``BASE_IMAGE`` build arg) under a content-addressed tag
``<repository>:polar-<digest>`` (the digest covers the context after ``.dockerignore``, the build args and the base
image), and the row's image name is pointed at it. An unchanged context is never rebuilt.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from polar_cli.errors import ConfigError, RuntimeFailure
from polar_cli.runtime.base import Log, Runtime
from polar_cli.runtime.images import split_image
from polar_cli.swe.manifest import BuildSpec, Instance, load_manifest

SWE_GYM_TEMPLATE = "docker.io/xingyaoww/sweb.eval.x86_64.{swegym_id}:latest"
SWE_BENCH_TEMPLATE = "swebench/sweb.eval.x86_64.{swebench_id}:latest"
TEMPLATES: Mapping[str, str] = {"swe-gym": SWE_GYM_TEMPLATE, "swe-bench": SWE_BENCH_TEMPLATE}


def image_fields(instance: Instance) -> dict[str, str]:
    """The names an image-name template may use."""
    lowered = instance.instance_id.lower()
    return {
        "instance_id": instance.instance_id,
        "swegym_id": lowered.replace("__", "_s_"),
        "swebench_id": lowered.replace("__", "_1776_"),
        "repo": instance.repo,
        "version": instance.version,
    }


def instance_image(instance: Instance, template: str | None = None) -> str:
    """The image ``instance`` runs in: its row's ``image``, else ``template`` (a known name or a format string)."""
    if instance.image:
        return instance.image
    if not template:
        raise ConfigError(f"instance {instance.instance_id}: image: missing, and no image-name template was given")
    pattern = TEMPLATES.get(template, template)
    try:
        return pattern.format(**image_fields(instance))
    except (KeyError, IndexError, ValueError) as exc:
        known = ", ".join(sorted(image_fields(instance)))
        raise ConfigError(f"image template {template!r}: {exc!r}; it may use {{{known}}}") from exc


def ensure_image(runtime: Runtime, image: str) -> None:
    """Make sure ``image`` is present, pulling it if the runtime can; a clear `RuntimeFailure` naming it otherwise."""
    if runtime.image_exists(image):
        return
    try:
        runtime.pull(image)
    except RuntimeFailure as exc:
        reason = f"pulling it failed: {exc}"
    else:
        if runtime.image_exists(image):
            return
        reason = "the pull ended without it"
    raise RuntimeFailure(f"image {image} is not present and cannot be pulled ({reason})")


# ---- building --------------------------------------------------------------------------------------------------


def _ignore_patterns(context: Path) -> list[str]:
    path = context / ".dockerignore"
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line.rstrip("/") for line in lines if line and not line.startswith(("#", "!"))]


def _ignored(relative: str, patterns: Iterable[str]) -> bool:
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        # "**/x" matches x at any depth, the top level included (fnmatch's "*" also crosses "/")
        alternatives = (pattern[3:], "*/" + pattern[3:]) if pattern.startswith("**/") else (pattern,)
        if any(fnmatch.fnmatchcase(prefix, alt) for prefix in prefixes for alt in alternatives):
            return True
    return False


def build_context(spec: BuildSpec) -> dict[str, bytes]:
    """The files Docker would receive for ``spec`` (``.dockerignore`` applied), with its Dockerfile as "Dockerfile"."""
    from polar_cli.runtime.images import context_files

    files = context_files(spec.context)
    patterns = _ignore_patterns(spec.context)
    files = {name: data for name, data in files.items() if not _ignored(name, patterns)}
    if spec.dockerfile not in files:
        raise ConfigError(f"build spec: {spec.dockerfile} not found in {spec.context}")
    files["Dockerfile"] = files[spec.dockerfile]
    return files


@dataclass(frozen=True, slots=True)
class InstanceImageBuild:
    image: str
    built_tag: str  # the content-addressed tag `image` points at
    built: bool  # False: an identical build already existed
    seconds: float
    instances: tuple[str, ...]


def _build_groups(instances: Iterable[Instance]) -> dict[str, tuple[BuildSpec, list[str]]]:
    groups: dict[str, tuple[BuildSpec, list[str]]] = {}
    for instance in instances:
        if instance.build is None:
            continue
        if not instance.image:
            raise ConfigError(f"instance {instance.instance_id}: build: given, but the row names no image to build")
        spec, ids = groups.setdefault(instance.image, (instance.build, []))
        if spec != instance.build:
            raise ConfigError(
                f"instance {instance.instance_id}: build: differs from instance {ids[0]}'s build of {instance.image}"
            )
        ids.append(instance.instance_id)
    return groups


def build_instance_images(manifest_path: str | Path, runtime: Runtime, *, log: Log = print) -> list[InstanceImageBuild]:
    """Build every image the manifest's build specs describe (bootstrapping the base image first if needed)."""
    instances = load_manifest(manifest_path)
    if not any(i.build is not None for i in instances):
        raise ConfigError(f"manifest {manifest_path}: no row carries a build spec")
    return build_images(instances, runtime, log=log)


def build_images(instances: Iterable[Instance], runtime: Runtime, *, log: Log = print) -> list[InstanceImageBuild]:
    """Build the images the build specs of ``instances`` describe (rows without one are left out), each tagged by its
    build context's digest and that tag named as the row's image: a context that has not changed is not built
    again."""
    from polar_cli.runtime.images import context_digest

    groups = _build_groups(instances)
    if not groups:
        return []
    base = runtime.base_image(log=log)
    results = []
    for image, (spec, ids) in groups.items():
        start = time.monotonic()
        files = build_context(spec)
        buildargs = {"BASE_IMAGE": base, **spec.args}
        repository, _tag = split_image(image)
        built_tag = f"{repository}:polar-{context_digest(files, buildargs)}"
        built = not runtime.image_exists(built_tag)
        if built:
            log(f"building {image} ({built_tag}) for {len(ids)} instance(s)")
            runtime.build(files, built_tag, buildargs=buildargs, log=log)
        runtime.tag(built_tag, image)
        results.append(InstanceImageBuild(image, built_tag, built, time.monotonic() - start, tuple(ids)))
    return results

"""Which checks run for `polar doctor` and for the start of `polar generate`, and how they are printed.

`diagnose` is the whole listing (Docker, images, manifest, engine, tokenizer, disk, CA bundle); `preflight` is the
part of it that must stop a run before anything starts, and returns only the failures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polar_cli.doctor.checks import (
    Check,
    HasImage,
    base_image_check,
    bundle_checks,
    ca_bundle_check,
    disk_check,
    docker_check,
    engine_checks,
    instance_image_checks,
    manifest_check,
    min_free_gb,
    relay_check,
    tokenizer_check,
)
from polar_cli.errors import PolarError
from polar_cli.runtime.base import GATEWAY_ONLY

if TYPE_CHECKING:
    from polar_cli.config import Recipe
    from polar_cli.harness.base import HarnessAdapter
    from polar_cli.swe.manifest import Instance

# preflight's engine call: reachability and the served model only, no sampling
PREFLIGHT_ENGINE_TIMEOUT = 10.0


def _image_checks(recipe: Recipe | None, has_image: HasImage, instances: Sequence[Instance]) -> list[Check]:
    from polar_cli.harness import ADAPTERS

    build = recipe.runtime.build_images if recipe is not None else True
    adapters: list[HarnessAdapter] = recipe.adapters() if recipe is not None else list(ADAPTERS.values())
    checks = [base_image_check(has_image)]
    checks += bundle_checks(adapters, has_image, build=build, required=recipe is not None)
    if recipe is None or recipe.runtime.network == GATEWAY_ONLY:
        checks.append(relay_check(has_image, build=build, required=recipe is not None))
    if recipe is not None and instances:
        m = recipe.manifest
        checks += instance_image_checks(instances, has_image, template=m.image_template, source=m.source, build=build)
    return checks


def diagnose(recipe: Recipe | None, run_dir: Path) -> list[Check]:
    """Every check, in the order they are printed. Without a recipe: the engine-independent ones, every built-in
    harness's bundle (missing ones as warnings), and the disk at ``run_dir``."""
    docker, has_image = docker_check()
    checks = [docker]
    instances: list[Instance] = []
    if recipe is not None:
        manifest, instances = manifest_check(recipe)
        checks.append(manifest)
    if has_image is None:
        checks.append(Check("images", "warn", "not checked: no Docker engine answers"))
    else:
        checks += _image_checks(recipe, has_image, instances)
    if recipe is not None:
        checks += engine_checks(recipe.engine)
        checks.append(tokenizer_check(recipe.engine))
    checks.append(disk_check(run_dir, min_free_gb(recipe)))
    checks.append(ca_bundle_check())
    return checks


def preflight(
    recipe: Recipe,
    run_dir: Path,
    *,
    instances: Sequence[Instance] | None = None,
    has_image: HasImage | None = None,
) -> list[Check]:
    """The failing checks that must stop ``recipe``'s run in ``run_dir`` before it starts anything: no Docker engine,
    an image the run needs and cannot build (``runtime.build_images`` false), an engine URL that does not answer,
    less free disk than ``runtime.min_free_gb``. Empty when the run may start.

    ``instances``: the run's selection when it has made it already (else selected here; a manifest problem is left
    to the run, which reports it as a usage error). ``has_image``: image presence from the run's own runtime
    (``runtime.image_exists``) instead of asking the Docker engine. Synchronous: it runs its own event loop for the
    engine, so call it before the run's loop starts."""
    checks: list[Check] = []
    if has_image is None:
        docker, has_image = docker_check()
        checks.append(docker)
    if has_image is not None:
        if instances is None:
            from polar_cli.tasks.select import select_instances

            try:
                instances = select_instances(recipe)
            except (PolarError, OSError):
                instances = []
        checks += _image_checks(recipe, has_image, instances)
    if recipe.engine.kind not in ("gold", "noop") and not recipe.engine.launches():
        checks += engine_checks(recipe.engine, tokens=False, timeout=PREFLIGHT_ENGINE_TIMEOUT)
    checks.append(disk_check(run_dir, min_free_gb(recipe)))
    return [c for c in checks if c.status == "fail"]


def line(check: Check, mark: Callable[[str], str] = str) -> str:
    """``status  name  detail  -> fix``: one line per check; ``mark`` dresses the status (a terminal's colour)."""
    text = f"{mark(f'{check.status:<4}')}  {check.name:<16}  {check.detail}"
    return f"{text}  -> {check.fix}" if check.fix and check.status != "ok" else text


def counts(checks: Sequence[Check]) -> dict[str, int]:
    return {status: sum(c.status == status for c in checks) for status in ("ok", "warn", "fail")}


def as_json(checks: Sequence[Check]) -> dict[str, Any]:
    """The ``--json`` shape: ``{"ok": bool, "counts": {"ok", "warn", "fail"}, "checks": [{name, status, detail,
    fix}]}``; ``ok`` is false when any check failed."""
    tally = counts(checks)
    return {"ok": tally["fail"] == 0, "counts": tally, "checks": [c.to_dict() for c in checks]}

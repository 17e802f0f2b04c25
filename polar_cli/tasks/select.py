"""What a run works on: the instances a recipe's manifest selects (SWE-Gym / SWE-bench rows, or Harbor task folders
read as instances), and the images each session starts from, built or pulled before anything runs.

`polar generate` plans its sessions from these, and `polar doctor` checks them, so both read one selection.
"""

from __future__ import annotations

import logging

from polar_cli.config import Recipe
from polar_cli.errors import ConfigError
from polar_cli.harbor.tasks import HarborTask, is_task_source, load_tasks
from polar_cli.runtime.base import Runtime
from polar_cli.swe.manifest import Instance, load_manifest, parse_shard, select
from polar_cli.tasks.images import Images
from polar_cli.tasks.kinds import TaskKind, kind_of

log = logging.getLogger("polar.generate")


def select_instances(recipe: Recipe) -> list[Instance]:
    return select_tasks(recipe)[0]


def select_tasks(recipe: Recipe) -> tuple[list[Instance], dict[str, HarborTask]]:
    """The selected instances, and the Harbor task of each that is one (a manifest source that is a folder of Harbor
    tasks: each task an `Instance` whose image is its own, `harbor.images`)."""
    m = recipe.manifest
    harbor: dict[str, HarborTask] = {}
    if is_task_source(m.source):
        from polar_cli.harbor.images import base_tag, task_image

        base = base_tag()
        harbor = {t.name: t for t in load_tasks(m.source)}
        rows = [t.instance(task_image(t, recipe.harbor.base_images, base).tag) for t in harbor.values()]
    else:
        rows = load_manifest(m.source)
    chosen = select(
        rows,
        instance_ids=m.instance_ids,
        repos=m.repos,
        limit=m.limit,
        shard=parse_shard(m.shard) if m.shard else None,
    )
    if not chosen:
        raise ConfigError(f"manifest {m.source}: no instance selected")
    return chosen, {i.instance_id: harbor[i.instance_id] for i in chosen if i.instance_id in harbor}


def prepare_images(
    recipe: Recipe, instances: list[Instance], runtime: Runtime, harbor: dict[str, HarborTask] | None = None
) -> tuple[dict[str, str | None], dict[str, str]]:
    """(harness -> bundle to mount or None, instance_id -> image), building or pulling what is missing: each kind
    of task makes its own images ready (`TaskKind.ready_images`), all of its tasks at once."""
    from polar_cli.harness.session import mount_bundle

    build = recipe.runtime.build_images
    bundles = {a.name: mount_bundle(runtime, a, build=build, log=log.info) for a in recipe.adapters()}
    by_kind: dict[type[TaskKind], list[tuple[Instance, TaskKind]]] = {}
    for instance in instances:
        kind = kind_of((harbor or {}).get(instance.instance_id))
        by_kind.setdefault(type(kind), []).append((instance, kind))
    images: dict[str, str] = {}
    for kind_type, tasks in by_kind.items():
        images |= kind_type.ready_images(tasks, Images.of_recipe(recipe, runtime, log.info))
    return bundles, images

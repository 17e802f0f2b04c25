"""Where a run's task images come from (`Images`): what each kind's `kinds.TaskKind.ready_images` makes them ready
with, whether the run knows all its tasks at start (`polar generate`: `select.prepare_images`) or learns them as they
come (the rollout service, a cluster's nodes: `node.session_stages.SessionStages.image`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from polar_cli.config import Recipe
    from polar_cli.runtime.base import Log, Runtime


@dataclass(frozen=True, slots=True)
class Images:
    """Where the images of a run's tasks come from: the runtime, whether a missing one is built (else pulled), the
    manifest SWE instances were read from and its image name template, the FROM table that Harbor tasks' Dockerfiles
    are mapped by."""

    runtime: Runtime
    build: bool
    log: Log
    # the run's own manifest; None: rows a caller sent (the service's inline instances), whose build specs are not
    # built (they would name directories of this machine)
    manifest: str | None = None
    template: str | None = None
    harbor_bases: Mapping[str, str] | None = None

    @classmethod
    def of_recipe(cls, recipe: Recipe, runtime: Runtime, log: Log) -> Images:
        m = recipe.manifest
        bases = recipe.harbor.base_images
        return cls(runtime, recipe.runtime.build_images, log, m.source, m.image_template, bases)

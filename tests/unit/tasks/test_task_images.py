"""Each kind of task makes its own images ready (`TaskKind.ready_images`), all its tasks at once: SWE instances'
built from the manifest's build specs (only the ones the selection needs) or pulled, Harbor tasks' built from their
Dockerfiles. Runs that learn their tasks as they come (the service, a cluster's nodes) make each image ready once
(`SessionStages.image`). A fake runtime stands in for Docker: these tests show what is built, tagged and pulled, not
that Docker builds it (tests/integration/swe and tests/integration/harbor do)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from polar_cli.config import load_recipe
from polar_cli.harbor.images import base_tag, task_image
from polar_cli.node.session_stages import SessionStages
from polar_cli.node.session_steps import SessionSteps
from polar_cli.swe.images import instance_image
from polar_cli.tasks.images import Images
from polar_cli.tasks.kinds import SWE, HarborKind
from polar_cli.tasks.select import prepare_images, select_tasks
from tests.support.fake_runtime import FakeRuntime

ROOT = Path(__file__).resolve().parents[3]


def test_swe_builds_only_the_images_its_selected_instances_need() -> None:
    recipe = load_recipe(ROOT / "recipes" / "demo.yaml")
    instances, harbor = select_tasks(recipe)
    assert harbor == {}
    groups = {i.image for i in instances if i.build is not None}
    assert len(groups) >= 2  # the demo's repositories have images of their own

    everything = FakeRuntime()
    _, images = prepare_images(recipe, instances, everything)
    assert images == {i.instance_id: instance_image(i, recipe.manifest.image_template) for i in instances}
    assert {target for _, target in everything.tags} == groups
    assert all(everything.image_exists(image) for image in images.values())

    one = FakeRuntime()
    first = instances[0]
    _, images = prepare_images(recipe, [first], one)
    assert images == {first.instance_id: first.image}
    assert [target for _, target in one.tags] == [first.image]  # the other repositories' images are not built
    assert one.pulls == []

    kept = FakeRuntime()  # built (tagged by its context's digest) the first time, found the second
    for _ in range(2):
        SWE.ready_images([(first, SWE)], Images.of_recipe(recipe, kept, print))
    assert len(kept.builds) == 1 and len(kept.tags) == 2


def test_swe_pulls_what_no_build_spec_makes() -> None:
    recipe = load_recipe(ROOT / "recipes" / "demo.yaml")
    first = select_tasks(recipe)[0][0]
    runtime = FakeRuntime(pull_error=None)  # a runtime that reaches a registry
    SWE.ready_images([(first, SWE)], Images(runtime, build=False, log=print, manifest=recipe.manifest.source))
    assert runtime.builds == [] and runtime.pulls == [first.image]


def test_harbor_tasks_are_built_from_their_dockerfiles() -> None:
    recipe = load_recipe(ROOT / "recipes" / "demo-terminal.yaml")
    instances, harbor = select_tasks(recipe)
    assert set(harbor) == {i.instance_id for i in instances}
    runtime = FakeRuntime()
    _, images = prepare_images(recipe, instances, runtime, harbor)
    expected = {name: task_image(t, recipe.harbor.base_images, base_tag()).tag for name, t in harbor.items()}
    assert images == expected == {i.instance_id: i.image for i in instances}
    assert sorted(tag for tag, _ in runtime.builds) == sorted(expected.values())

    # a node that learns one task at a time builds just its image (the cluster's nodes and the service do so)
    name, task = next(iter(harbor.items()))
    instance = next(i for i in instances if i.instance_id == name)
    single = FakeRuntime()
    kind = HarborKind(task)
    assert HarborKind.ready_images([(instance, kind)], Images.of_recipe(recipe, single, print)) == {
        name: instance.image
    }
    assert [tag for tag, _ in single.builds] == [instance.image]


def test_a_node_makes_each_image_ready_once_however_many_sessions_ask() -> None:
    runtime = FakeRuntime(pull_error=None)
    made: list[str] = []

    def make_ready(image: str) -> Any:
        made.append(image)
        runtime.images.add(image)

    async def main() -> None:
        with ThreadPoolExecutor(2) as pool:
            gateway: Any = SimpleNamespace(engine=SimpleNamespace(model="m"))
            stages = SessionStages(SessionSteps(runtime, pool), gateway, egress=None, build_images=True)  # type: ignore[arg-type]
            await asyncio.gather(*(stages.image("img:1", lambda: make_ready("img:1")) for _ in range(5)))
            await stages.image("img:2", None)  # a task's own image: nothing to build, pulled
            await stages.image("img:2", None)

    asyncio.run(main())
    assert made == ["img:1"]
    assert runtime.pulls == ["img:2"]

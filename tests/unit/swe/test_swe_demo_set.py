"""The bundled demo set (recipes/demo) is complete and in sync with its sources.

That every instance really resolves with its gold patch and fails without it is checked in containers by
tests/integration/swe; here: shape, and that instances.jsonl matches what make_instances.py derives from the sources.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import orjson
import pytest

from polar_cli.swe.diffs import runner_targets
from polar_cli.swe.manifest import load_manifest

DEMO = Path(__file__).resolve().parents[3] / "recipes" / "demo"


@pytest.fixture(scope="module")
def make_instances() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_make_instances", DEMO / "make_instances.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_at_least_eight_instances_over_three_repositories() -> None:
    instances = load_manifest(DEMO / "instances.jsonl")
    assert len(instances) >= 8
    assert len({i.repo for i in instances}) >= 3
    for i in instances:
        assert i.fail_to_pass and i.pass_to_pass, i.instance_id
        assert i.problem_statement.strip() and i.version and i.image and i.build is not None, i.instance_id
        assert i.build.context == DEMO and (DEMO / i.build.dockerfile).is_file()
        assert i.environment_setup_commit == i.base_commit and len(i.base_commit) == 40
        # every graded test lives in a file the test patch touches (those are the files that run)
        targets = runner_targets(i.test_patch)
        assert all(t.split("::")[0] in targets for t in (*i.fail_to_pass, *i.pass_to_pass)), i.instance_id


def test_instances_jsonl_matches_the_sources(make_instances: ModuleType) -> None:
    stored = [orjson.loads(line) for line in (DEMO / "instances.jsonl").read_bytes().splitlines()]
    fresh = make_instances.build_rows(run_tests=False)
    assert [r["instance_id"] for r in fresh] == [r["instance_id"] for r in stored]
    for new, old in zip(fresh, stored, strict=True):
        for key in ("base_commit", "patch", "test_patch", "problem_statement", "image", "build", "repo", "test_cmd"):
            assert new[key] == old[key], f"{old['instance_id']}: {key} is stale: run recipes/demo/make_instances.py"


def test_base_commit_is_reproducible(make_instances: ModuleType) -> None:
    stored = {
        orjson.loads(line)["repo"]: orjson.loads(line)["base_commit"]
        for line in (DEMO / "instances.jsonl").read_bytes().splitlines()
    }
    for repo, commit in stored.items():
        with make_instances.base_checkout(repo.split("/")[1]) as (_work, base_commit):
            assert base_commit == commit

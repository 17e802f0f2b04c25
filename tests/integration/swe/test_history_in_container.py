"""The history strip of INIT (`harness/history.py`) inside a real instance container, with the image's own git.

The demo image holds one commit; the test gives it what SWE-bench images hold (the later fix commit, a branch, a
tag, a remote-tracking ref, a stash, a reflog), then runs INIT's strip and looks for the fix the way agents did
(mini-swe-agent issue 787: `git log --all`, `git show <sha>`, the reflog, dangling objects).
"""

from __future__ import annotations

import pytest

from polar_cli.harness.history import strip_history
from polar_cli.runtime.base import ContainerSpec
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.swe.images import InstanceImageBuild
from polar_cli.swe.manifest import load_manifest
from tests.integration.swe.conftest import DEMO_MANIFEST

pytestmark = pytest.mark.integration

FUTURE = r"""
set -e
cd /testbed
export GIT_AUTHOR_NAME=u GIT_AUTHOR_EMAIL=u@x GIT_COMMITTER_NAME=u GIT_COMMITTER_EMAIL=u@x
git config --global --add safe.directory /testbed
echo "the gold fix" > FIX.txt && git add FIX.txt && git commit -qm "Fix the bug (gold)"
fix=$(git rev-parse HEAD)
git branch -q fix-branch && git tag v9.9 && git update-ref refs/remotes/origin/main "$fix"
git reset -q --hard HEAD~1
echo wip > WIP.txt && git add WIP.txt && git stash -q
echo "$fix"
"""


def sh(container: object, script: str) -> str:
    result = container.exec(["sh", "-c", script], timeout=60)  # type: ignore[attr-defined]
    out = result.output.decode()
    assert result.exit_code == 0, out
    return out


def test_nothing_after_the_base_commit_is_left_for_the_agent(
    docker_runtime: DockerRuntime, demo_images: list[InstanceImageBuild]
) -> None:
    instance = next(i for i in load_manifest(DEMO_MANIFEST) if i.instance_id == "polar-demo__textkit-7")
    assert instance.image is not None
    container = docker_runtime.start(ContainerSpec(image=instance.image, role="session", network="none"))
    try:
        fix = sh(container, FUTURE).split()[-1]
        assert fix in sh(container, "cd /testbed && git log --all --format=%H")  # the leak is there
        stripped = strip_history(container, "/testbed", instance.base_commit)
        assert stripped.refs >= 4 and stripped.repacked
        assert sh(container, "cd /testbed && git log --all --format=%H").split() == [instance.base_commit]
        assert sh(container, "cd /testbed && git reflog --all; git stash list; git tag; git remote") == ""
        assert sh(container, "cd /testbed && git fsck --unreachable --no-reflogs 2>/dev/null; true").strip() == ""
        gone = container.exec(["git", "-C", "/testbed", "cat-file", "-e", fix], timeout=30)
        assert gone.exit_code != 0, "the fix commit is still in the object store"
        assert sh(container, "cd /testbed && git rev-parse HEAD").strip() == instance.base_commit
    finally:
        container.remove()

"""One generate session's POSTRUN parses the patch it collected once, and the instance's test patch once: the parsed
`swe.diffs.Patch` is handed to the tamper check, the apply script and the eval script (issue 27.4, 29.3)."""

from __future__ import annotations

import asyncio
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from polar_cli.config import parse_recipe
from polar_cli.generate.rows import build_row
from polar_cli.generate.stages import GenerateStages, PooledSession, SessionPlan
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionSpec, prepare
from polar_cli.node.pools import Job, RunEnd, Timings
from polar_cli.node.session_steps import SessionSteps
from polar_cli.runtime.base import ExecResult
from polar_cli.swe import diffs, grading
from polar_cli.swe.manifest import Instance
from tests.support.fake_runtime import PATCH, FakeContainer, FakeRuntime, result, session_responder
from tests.unit.generate.test_generate_rows import OK_RUN, RECIPE
from tests.unit.generate.test_generate_session_logs import Gateway

TEST_PATCH = (
    "diff --git a/tests/test_x.py b/tests/test_x.py\n"
    "--- a/tests/test_x.py\n+++ b/tests/test_x.py\n@@ -1 +1 @@\n-a\n+b\n"
)
INSTANCE = Instance(
    "org__repo-1", "org/repo", "abc", "Fix it.", PATCH, TEST_PATCH, ("tests/test_x.py::t1",), ("tests/test_x.py::t2",),
    test_cmd="pytest -rA",
)  # fmt: skip
PASSED = "\n".join([grading.START_TEST_OUTPUT, "PASSED tests/test_x.py::t1", "PASSED tests/test_x.py::t2"])


def responder(name: str, container: FakeContainer) -> ExecResult:
    """The session's container (its `git diff` is `PATCH`), then an evaluation whose tests pass."""
    if name == "apply.sh":
        return result(">>>>> Applied Patch (git apply --verbose)\n")
    if name == "eval.sh":
        return result(f"{PASSED}\n{grading.END_TEST_OUTPUT}\n")
    return session_responder(result("done"))(name, container)


def test_postrun_parses_the_collected_patch_once_and_the_test_patch_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses: Counter[str] = Counter()
    real = diffs.split_patch

    def split_patch(patch: str) -> tuple[str, list[diffs.FileDiff]]:
        parses[patch] += 1
        return real(patch)

    monkeypatch.setattr(diffs, "split_patch", split_patch)
    runtime = FakeRuntime(responder)
    with ThreadPoolExecutor(2) as pool:
        gateway = Gateway(tmp_path / "capture")
        steps = SessionSteps(runtime, pool)
        stages = GenerateStages(parse_recipe(RECIPE, []), steps, gateway, tmp_path, None)  # type: ignore[arg-type]
        plan = SessionPlan("org__repo-1::pi::1", INSTANCE, ADAPTERS["pi"], 1, "img:1", "bundle-pi")
        spec = SessionSpec("sid.pi.1.abc", ADAPTERS["pi"], "img:1", "fix it", "bundle-pi", base_commit="abc")
        session = PooledSession("sid.pi.1.abc", "sk", prepare(runtime, spec, Wiring(gateway.url, "sk")))
        facts = asyncio.run(stages.postrun(Job(plan.key, plan, 100.0), session, RunEnd("ok", OK_RUN), Timings()))
    _, row = build_row(facts, {})
    assert row["patch"] == PATCH and row["eval"]["resolved"] and row["eval"]["tamper"]["findings"] == []
    assert parses == {PATCH: 1, TEST_PATCH: 1}

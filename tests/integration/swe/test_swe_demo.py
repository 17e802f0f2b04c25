"""The demo set end to end in Docker: `polar validate` passes for every instance, and `polar evaluate` grades
gold, empty, wrong, test-editing, non-applying and hanging patches as SWE-bench would."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
from typer.testing import CliRunner

from polar_cli.commands.evaluate import evaluate
from polar_cli.commands.validate import validate
from polar_cli.harness import ADAPTERS
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.swe.evaluate import EvalJob, EvalOptions, evaluate_many
from polar_cli.swe.images import InstanceImageBuild
from polar_cli.swe.manifest import load_manifest

pytestmark = pytest.mark.integration

DEMO = Path(__file__).resolve().parents[3] / "recipes" / "demo"
MANIFEST = DEMO / "instances.jsonl"


def app() -> typer.Typer:
    cli = typer.Typer(add_completion=False)
    cli.command("evaluate")(evaluate)
    cli.command("validate")(validate)
    return cli


def edit(repo: str, path: str, old: str, new: str) -> str:
    """A git-style patch replacing ``old`` with ``new`` in a demo repository file."""
    before = (DEMO / "repos" / repo / path).read_text()
    assert old in before, (path, old)
    after = before.replace(old, new, 1)
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


GOLD = {i.instance_id: i.patch for i in load_manifest(MANIFEST)}
# plausible but wrong: special-cases one hour, and breaks even that
WRONG = edit("timespan", "timespan/format.py", "if remaining > size:", "if remaining > size or remaining == 3600:")
HANG = edit(
    "timespan", "timespan/format.py", "    if seconds == 0:\n", "    while True:\n        pass\n    if seconds == 0:\n"
)
CHEAT = edit(
    "textkit",
    "tests/test_truncate.py",
    "def test_short_text_unchanged():",
    "@pytest.mark.parametrize('width', [0, 1, 2, 3])\ndef test_result_never_exceeds_width(width):\n    pass\n\n\n"
    "def test_tiny_width_keeps_placeholder_prefix():\n    pass\n\n\ndef test_short_text_unchanged():",
)
# the line it removes is not in the file: no fuzz can place the hunk
NO_APPLY = GOLD["polar-demo__csvsift-4"].replace(
    "-    pages = max(1, total // per_page)", "-    pages = total / per_page"
)


def test_validate_passes_for_every_demo_instance(demo_images: list[InstanceImageBuild], tmp_path: Path) -> None:
    out = tmp_path / "validate.json"
    run = CliRunner().invoke(app(), ["validate", str(MANIFEST), "--workers", "2", "--out", str(out)])
    report = orjson.loads(out.read_bytes())
    reasons = {i["instance_id"]: i["reasons"] for i in report["instances"] if i["status"] != "valid"}
    assert run.exit_code == 0, (run.output, reasons)
    assert report["valid_instances"] == report["total_instances"] == len(GOLD)


def test_evaluate_grades_each_kind_of_patch(demo_images: list[InstanceImageBuild], tmp_path: Path) -> None:
    assert GOLD["polar-demo__csvsift-4"] != NO_APPLY
    predictions = {
        "polar-demo__textkit-7": ("gold", GOLD["polar-demo__textkit-7"]),
        "polar-demo__textkit-19": ("empty", ""),
        "polar-demo__timespan-3": ("wrong", WRONG),
        "polar-demo__textkit-12": ("cheat", CHEAT),
        "polar-demo__csvsift-4": ("no-apply", NO_APPLY),
        "polar-demo__timespan-8": ("hang", HANG),
    }
    path = tmp_path / "preds.jsonl"
    path.write_bytes(
        b"".join(
            orjson.dumps({"instance_id": i, "model_patch": p, "model_name_or_path": m}) + b"\n"
            for i, (m, p) in predictions.items()
        )
    )
    out = tmp_path / "report.json"
    argv = ["evaluate", str(path), "--manifest", str(MANIFEST), "--out", str(out), "--timeout", "20", "--workers", "2"]
    run = CliRunner().invoke(app(), argv)
    assert run.exit_code == 0, run.output
    report = orjson.loads(out.read_bytes())
    by_model: dict[str, dict[str, Any]] = {i["model_name_or_path"]: i for i in report["instances"]}
    assert report["resolved_ids"] == ["polar-demo__textkit-7"]
    assert report["error_ids"] == []
    assert by_model["gold"]["patch_successfully_applied"] is True
    assert by_model["empty"]["reason"] == "empty patch"
    assert by_model["wrong"]["resolved_status"] == "RESOLVED_PARTIAL"
    assert {t["test"].split("[")[1] for t in by_model["wrong"]["tests"] if not t["ok"]} == {
        "60-1m]",
        "3600-1h]",  # "0d 1h": the extra condition also fires in the days step
        "86400-1d]",
    }
    cheat_failures = by_model["cheat"]["tests_status"]["FAIL_TO_PASS"]["failure"]
    assert len(cheat_failures) == 4 and by_model["cheat"]["patch_successfully_applied"] is True
    assert by_model["no-apply"]["reason"] == "the patch did not apply"
    assert ">>>>> Patch Apply Failed" in by_model["no-apply"]["log_tail"]
    assert by_model["hang"]["reason"] == "the tests timed out after 20 s"


def test_same_instance_gold_empty_wrong(demo_images: list[InstanceImageBuild], docker_runtime: DockerRuntime) -> None:
    instance = next(i for i in load_manifest(MANIFEST) if i.instance_id == "polar-demo__timespan-3")
    assert instance.image is not None
    options = EvalOptions(image=instance.image, timeout=120)
    jobs = [
        EvalJob(instance, patch, options, name)
        for name, patch in (("gold", instance.patch), ("empty", ""), ("wrong", WRONG))
    ]
    results = evaluate_many(docker_runtime, jobs)
    assert [r.outcome for r in results] == ["resolved", "unresolved", "unresolved"]
    docker_runtime.settle()  # each evaluation's container is removed in the background once it is graded
    assert docker_runtime.live() == []  # every evaluation container was removed


@pytest.mark.parametrize("harness", list(ADAPTERS))
def test_validate_through_a_real_harness_accepts_the_gold_engine(
    harness: str, demo_images: list[InstanceImageBuild], tmp_path: Path
) -> None:
    """The gold engine's reference patch through each harness's own tool (or, for Aider, its edit blocks; for
    Terminus-2, one typed line)."""
    argv = ["validate", str(MANIFEST), "--harness", harness, "--instance-ids", "polar-demo__csvsift-4", "--json"]
    argv += ["--timeout", "300"]  # a harness that never ends fails in minutes, not at the default half hour
    run = CliRunner().invoke(app(), [*argv, "--out", str(tmp_path / "report.json"), "--run-id", "demo"])
    assert run.exit_code == 0, run.output
    report = orjson.loads(run.stdout)
    log_paths = report.pop("log_paths")
    assert report == {"harness": harness, "total_instances": 1, "accepted_instances": 1, "broken": {}, "run_id": "demo"}
    log = (tmp_path / log_paths["polar-demo__csvsift-4"]).read_text()  # the session's whole test log, kept
    assert ">>>>> End Test Output" in log and "PASSED" in log

"""Real instances from real public repositories (`tests/support/real_instances.py`: Django's runtests.py with dotted
labels, sympy's own runner, and pytest repositories with parametrised ids holding spaces, tabs and newlines, each
with its real dependencies from PyPI), graded through the CLI as a user would, then graded again from the logs on
disk by the official swebench 5.0.2 package: the verdicts and per-test statuses must be the same.

Per instance: `polar validate` says valid; the gold patch resolves; the empty, the wrong and the tampering patch do
not (the last is rejected as ``tamper``); with ``--swe-bench-exact`` the tampering patch is graded as SWE-bench grades
it, which is the same verdict as the oracle's on that log (for the pytest and Django attacks: fooled, both of them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from swebench.harness.grading import get_eval_report
from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY

from polar_cli.runtime.docker import DockerRuntime
from polar_cli.swe import grading
from polar_cli.swe.images import build_instance_images
from polar_cli.swe.manifest import Instance, load_manifest
from tests.support import real_instances

ROOT = Path(__file__).resolve().parents[3]
SPECS = {spec.instance_id: spec for spec in real_instances.load_specs()}
KINDS = ("gold", "wrong", "tamper")


@pytest.fixture(scope="session")
def real_manifest(docker_runtime: DockerRuntime) -> Path:
    manifest = real_instances.prepare()
    lines: list[str] = []
    for build in build_instance_images(manifest, docker_runtime, log=lines.append):
        assert docker_runtime.image_exists(build.image), "\n".join(lines)
    return manifest


@pytest.fixture(scope="session")
def instances(real_manifest: Path) -> dict[str, Instance]:
    return {i.instance_id: i for i in load_manifest(real_manifest)}


def polar(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "polar_cli", *map(str, args)]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="session")
def reports(real_manifest: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`polar validate` on the manifest and `polar evaluate` of each kind of candidate, their reports by name."""
    work = tmp_path_factory.mktemp("real")
    out: dict[str, Any] = {}
    validated = polar("validate", real_manifest, "--out", work / "validate.json", "--run-id", "real", cwd=work)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    out["validate"] = json.loads((work / "validate.json").read_text())
    patches = {spec.instance_id: real_instances.candidates(spec) for spec in SPECS.values()}
    instances = {i.instance_id: i for i in load_manifest(real_manifest)}
    runs = [(kind, kind, ()) for kind in KINDS] + [("tamper-exact", "tamper", ("--swe-bench-exact",))]
    for name, kind, flags in runs:
        predictions = work / f"{name}.jsonl"
        rows = [
            {
                "instance_id": iid,
                "model_name_or_path": name,
                "model_patch": instances[iid].patch if kind == "gold" else patches[iid][kind],
            }
            for iid in SPECS
        ]
        predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
        report = work / f"{name}.json"
        run = polar(
            "evaluate", predictions, "--manifest", real_manifest, "--out", report, "--run-id", "real", "--workers", "2",
            *flags, cwd=work,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        out[name] = json.loads(report.read_text())
    out["dir"] = work
    yield out


def _entries(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows = report.get("instances") or report.get("results") or report.get("evaluations")
    assert isinstance(rows, list), sorted(report)
    return {row["instance_id"]: row for row in rows}


def oracle(instance: Instance, log_path: Path) -> dict[str, Any]:
    """swebench 5.0.2's report on the log Polar wrote, with the parser SWE-bench uses for the repository."""
    parser = MAP_REPO_TO_PARSER_PY.get(instance.repo, PARSER_REGISTRY["parse_log_pytest"])
    name = next(key for key, fn in PARSER_REGISTRY.items() if fn is parser)
    spec = SimpleNamespace(
        instance_id=instance.instance_id,
        FAIL_TO_PASS=list(instance.fail_to_pass),
        PASS_TO_PASS=list(instance.pass_to_pass),
        log_parser=name,
        eval_type="pass_and_fail",
    )
    prediction = {"instance_id": instance.instance_id, "model_patch": "x", "model_name_or_path": "m"}
    return get_eval_report(spec, prediction, str(log_path), True)[instance.instance_id]  # type: ignore[arg-type]


def assert_same_as_oracle(entry: dict[str, Any], instance: Instance, root: Path) -> None:
    log = root / entry["log_path"]
    text = log.read_text()
    assert grading.START_TEST_OUTPUT in text and grading.END_TEST_OUTPUT in text, f"{log} is not whole"
    assert grading.TEST_EXIT_CODE in text.split(grading.END_TEST_OUTPUT, 1)[1]
    theirs = oracle(instance, log)
    assert entry["resolved"] is theirs["resolved"], (entry["reason"], theirs)
    assert entry["tests_status"] == theirs["tests_status"]


def test_the_set_covers_what_the_issue_asks() -> None:
    repos = {spec.repo for spec in SPECS.values()}
    assert len(SPECS) >= 5
    assert {"django/django", "sympy/sympy"} <= repos  # runners that are not pytest
    ids = [t for spec in SPECS.values() for t in (*spec.fail_to_pass, *spec.pass_to_pass)]
    assert any("::" in t and "[" in t and " " in t.split("[", 1)[1] for t in ids) or any(
        t.endswith("[") for t in ids
    )  # a parametrised id with a space (SWE-bench lists it by its first word)
    assert any("\\n" in t for t in ids)  # ...and one with a newline, as pytest escapes it
    assert all(spec.fail_to_pass for spec in SPECS.values())


@pytest.mark.parametrize("instance_id", sorted(SPECS))
def test_validate_says_valid_and_keeps_both_logs(
    instance_id: str, reports: dict[str, Any], instances: dict[str, Instance]
) -> None:
    entry = _entries(reports["validate"])[instance_id]
    assert entry["status"] == "valid", entry["reasons"]
    for run in ("gold", "without_fix"):
        assert_same_as_oracle(entry[run], instances[instance_id], reports["dir"])


@pytest.mark.parametrize("instance_id", sorted(SPECS))
def test_gold_resolves_and_wrong_does_not_as_swebench_grades_them(
    instance_id: str, reports: dict[str, Any], instances: dict[str, Instance]
) -> None:
    gold = _entries(reports["gold"])[instance_id]
    wrong = _entries(reports["wrong"])[instance_id]
    assert gold["outcome"] == "resolved", gold["reason"]
    assert wrong["outcome"] == "unresolved", wrong["reason"]
    assert wrong["tests_status"]["FAIL_TO_PASS"]["failure"]
    for entry in (gold, wrong):
        assert_same_as_oracle(entry, instances[instance_id], reports["dir"])


@pytest.mark.parametrize("instance_id", sorted(SPECS))
def test_tampering_is_rejected_and_would_fool_swebench(
    instance_id: str, reports: dict[str, Any], instances: dict[str, Instance]
) -> None:
    rejected = _entries(reports["tamper"])[instance_id]
    assert rejected["outcome"] == "unresolved"
    assert rejected["reason"].startswith("tamper: "), rejected["reason"]
    exact = _entries(reports["tamper-exact"])[instance_id]
    assert exact["tamper"]["findings"], "the check still reports what it found with --swe-bench-exact"
    assert_same_as_oracle(exact, instances[instance_id], reports["dir"])
    if instances[instance_id].repo != "sympy/sympy":  # sympy's runner reads neither conftest.py nor unittest
        assert exact["resolved"], "the attack is real: without the check, both graders call it resolved"

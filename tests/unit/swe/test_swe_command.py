"""`polar evaluate` / `polar validate` exit codes and output, on a scripted runtime."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
from swe_fakes import FakeRuntime, marked_log, result
from typer.testing import CliRunner

from polar_cli.commands import swe_jobs
from polar_cli.commands.evaluate import evaluate
from polar_cli.commands.validate import validate
from polar_cli.errors import PolarError, RuntimeFailure
from polar_cli.runtime.base import ExecResult

GOLD = "diff --git a/src.py b/src.py\n--- a/src.py\n+++ b/src.py\n@@ -1 +1 @@\n-a\n+b\n"
WRONG = "diff --git a/src.py b/src.py\n--- a/src.py\n+++ b/src.py\n@@ -1 +1 @@\n-a\n+c\n"
TEST_PATCH = "diff --git a/tests/t.py b/tests/t.py\n--- a/tests/t.py\n+++ b/tests/t.py\n@@ -1 +1 @@\n-a\n+b\n"


def row(instance_id: str, image: str | None = "img:1") -> dict[str, Any]:
    return {
        "instance_id": instance_id,
        "repo": "o/r",
        "base_commit": "a" * 40,
        "problem_statement": "",
        "patch": GOLD,
        "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": ["t::bug"],
        "PASS_TO_PASS": ["t::ok"],
        "test_cmd": "pytest -rA",
        "image": image,
    }


def respond(script: str, files: Mapping[str, bytes]) -> ExecResult:
    # the fake repository: GOLD fixes t::bug, WRONG breaks t::ok, no patch leaves t::bug failing
    if script == "apply.sh":
        return result(">>>>> Applied Patch\n")
    patch = files["/tmp/polar-eval/model.patch"].decode()
    bug = "PASSED t::bug" if patch == GOLD else "FAILED t::bug - x"
    ok = "FAILED t::ok - y" if patch == WRONG else "PASSED t::ok"
    return result(marked_log(bug, ok))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeRuntime:
    monkeypatch.chdir(tmp_path)  # without --out the logs go under the working directory
    runtime = FakeRuntime(respond)
    monkeypatch.setattr(swe_jobs, "open_runtime", lambda: runtime)
    return runtime


def app() -> typer.Typer:
    cli = typer.Typer(add_completion=False)
    cli.command("evaluate")(evaluate)
    cli.command("validate")(validate)
    return cli


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app(), list(args))


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "m.jsonl", [row("o__r-1"), row("o__r-2"), row("o__r-3")])


def predictions(tmp_path: Path, patches: dict[str, str | None]) -> Path:
    rows = [{"instance_id": i, "model_patch": p, "model_name_or_path": "m"} for i, p in patches.items()]
    return write_jsonl(tmp_path / "preds.jsonl", rows)


def test_evaluate_gold_empty_wrong(fake: FakeRuntime, manifest: Path, tmp_path: Path) -> None:
    preds = predictions(tmp_path, {"o__r-1": GOLD, "o__r-2": "", "o__r-3": WRONG})
    out = tmp_path / "report.json"
    run = invoke("evaluate", str(preds), "--manifest", str(manifest), "--out", str(out))
    assert run.exit_code == 0, run.output
    assert "resolved 1/3" in run.stdout
    report = orjson.loads(out.read_bytes())
    assert (report["resolved_ids"], report["unresolved_ids"], report["error_ids"]) == (
        ["o__r-1"],
        ["o__r-2", "o__r-3"],
        [],
    )
    wrong = report["instances"][2]
    assert wrong["tests"] == [
        {"test": "t::bug", "group": "FAIL_TO_PASS", "status": "FAILED", "ok": False},
        {"test": "t::ok", "group": "PASS_TO_PASS", "status": "FAILED", "ok": False},
    ]
    assert all(c.removed for c in fake.containers)


def test_evaluate_json_output(fake: FakeRuntime, manifest: Path, tmp_path: Path) -> None:
    run = invoke("evaluate", str(predictions(tmp_path, {"o__r-1": GOLD})), "--manifest", str(manifest), "--json")
    assert run.exit_code == 0
    payload = orjson.loads(run.stdout)
    assert (payload["total_instances"], payload["resolved_instances"]) == (1, 1)
    assert payload["instances"][0]["patch_successfully_applied"] is True


def test_evaluate_exit_1_when_an_instance_cannot_be_evaluated(fake: FakeRuntime, tmp_path: Path) -> None:
    manifest = write_jsonl(tmp_path / "m.jsonl", [row("o__r-1"), row("o__r-2", image="gone:1")])
    run = invoke(
        "evaluate", str(predictions(tmp_path, {"o__r-1": GOLD, "o__r-2": GOLD})), "--manifest", str(manifest), "--json"
    )
    assert run.exit_code == 1
    payload = orjson.loads(run.stdout)
    assert payload["error_ids"] == ["o__r-2"]
    assert "image gone:1 is not present" in payload["instances"][1]["reason"]


@pytest.mark.parametrize(
    ("rows", "extra", "message"),
    [
        (
            [{"instance_id": "nope__n-1", "model_patch": GOLD}],
            [],
            "predictions for instances not in the manifest: nope__n-1",
        ),
        ([{"instance_id": "o__r-1"}], [], "row 0 (o__r-1): model_patch: missing"),
        ([{"instance_id": "o__r-1", "model_patch": 3}], [], "model_patch: expected a string or null, got int"),
        ([{"instance_id": "o__r-1", "model_patch": GOLD}] * 2, [], "row 1 (o__r-1): instance_id: predicted twice"),
        ([{"instance_id": "o__r-1", "model_patch": GOLD}], ["--timeout", "0"], "--timeout must be positive"),
    ],
)
def test_evaluate_bad_usage_exits_2(
    fake: FakeRuntime, manifest: Path, tmp_path: Path, rows: list[dict[str, Any]], extra: list[str], message: str
) -> None:
    preds = write_jsonl(tmp_path / "p.jsonl", rows)
    run = invoke("evaluate", str(preds), "--manifest", str(manifest), *extra)
    assert run.exit_code == 2
    assert message in run.stderr
    assert fake.containers == []


def test_evaluate_rows_without_image_need_a_template(fake: FakeRuntime, tmp_path: Path) -> None:
    manifest = write_jsonl(tmp_path / "m.jsonl", [row("o__r-1", image=None)])
    preds = predictions(tmp_path, {"o__r-1": GOLD})
    run = invoke("evaluate", str(preds), "--manifest", str(manifest))
    assert run.exit_code == 2 and "o__r-1: image: missing" in run.stderr
    fake.images.add("docker.io/xingyaoww/sweb.eval.x86_64.o_s_r-1:latest")
    run = invoke("evaluate", str(preds), "--manifest", str(manifest), "--image-template", "swe-gym")
    assert run.exit_code == 0, run.output
    assert fake.specs[0].image == "docker.io/xingyaoww/sweb.eval.x86_64.o_s_r-1:latest"


def test_no_engine_exits_1(monkeypatch: pytest.MonkeyPatch, manifest: Path, tmp_path: Path) -> None:
    def no_engine() -> FakeRuntime:
        raise RuntimeFailure("no Docker engine answers")

    monkeypatch.setattr(swe_jobs, "open_runtime", no_engine)
    run = invoke("evaluate", str(predictions(tmp_path, {"o__r-1": GOLD})), "--manifest", str(manifest))
    assert (run.exit_code, "no Docker engine answers" in run.stderr) == (1, True)
    assert issubclass(RuntimeFailure, PolarError)


def test_validate_all_valid(fake: FakeRuntime, manifest: Path, tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    run = invoke("validate", str(manifest), "--out", str(out))
    assert run.exit_code == 0, run.output
    assert "valid 3/3" in run.stdout
    assert orjson.loads(out.read_bytes())["valid_instances"] == 3
    assert len(fake.containers) == 6  # gold and no patch, each in a fresh container


def test_validate_lists_broken_instances_and_exits_1(fake: FakeRuntime, tmp_path: Path) -> None:
    broken = {**row("o__r-2"), "patch": WRONG}
    manifest = write_jsonl(tmp_path / "m.jsonl", [row("o__r-1"), broken])
    run = invoke("validate", str(manifest), "--json")
    assert run.exit_code == 1
    payload = orjson.loads(run.stdout)
    assert payload["broken_ids"] == ["o__r-2"]
    assert payload["instances"][1]["reasons"] == ["the gold patch does not resolve it; failing: t::bug, t::ok"]


def test_validate_selection(fake: FakeRuntime, manifest: Path) -> None:
    run = invoke("validate", str(manifest), "--instance-ids", "o__r-3,o__r-1", "--shard", "1/2", "--json")
    assert run.exit_code == 0, run.output
    assert [i["instance_id"] for i in orjson.loads(run.stdout)["instances"]] == ["o__r-3"]
    run = invoke("validate", str(manifest), "--instance-ids", "o__r-9")
    assert run.exit_code == 2 and "not in the manifest: o__r-9" in run.stderr


def test_validate_harness_rejects_an_unknown_harness_before_running(fake: FakeRuntime, manifest: Path) -> None:
    run = invoke("validate", str(manifest), "--harness", "no-such-harness")
    assert run.exit_code == 2
    assert "no-such-harness" in run.stderr
    assert fake.containers == []


# ---- whole logs on disk (SWE-bench's logs/run_evaluation/<run_id>/<model>/<instance_id>/) ----

LONG_LINES = [f"PASSED t::filler_{n} padding the log past the report's tail" for n in range(2_000)]


def long_respond(script: str, files: Mapping[str, bytes]) -> ExecResult:
    # the test output alone is far longer than LOG_TAIL, so the tail cannot hold its start marker
    if script == "apply.sh":
        return result(">>>>> Applied Patch (git apply --verbose)\n")
    patch = files["/tmp/polar-eval/model.patch"].decode()
    bug = "PASSED t::bug" if patch == GOLD else "FAILED t::bug - x"
    return result(marked_log(*LONG_LINES, bug, "PASSED t::ok"))


@pytest.fixture
def long_fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeRuntime:
    monkeypatch.chdir(tmp_path)
    runtime = FakeRuntime(long_respond)
    monkeypatch.setattr(swe_jobs, "open_runtime", lambda: runtime)
    return runtime


def expected_test_output(patch: str) -> str:
    bug = "PASSED t::bug" if patch == GOLD else "FAILED t::bug - x"
    return marked_log(*LONG_LINES, bug, "PASSED t::ok")


def test_evaluate_writes_each_whole_log_beside_the_report(long_fake: FakeRuntime, tmp_path: Path) -> None:
    from polar_cli.swe import grading
    from polar_cli.swe.evaluate import LOG_TAIL

    manifest = write_jsonl(tmp_path / "m.jsonl", [row("o__r-1"), row("o__r-2")])
    preds = write_jsonl(
        tmp_path / "preds.jsonl",
        [
            {"instance_id": "o__r-1", "model_patch": GOLD, "model_name_or_path": "org/model"},
            {"instance_id": "o__r-2", "model_patch": WRONG, "model_name_or_path": "org/model"},
        ],
    )
    (tmp_path / "reports").mkdir()
    out = tmp_path / "reports" / "report.json"
    run = invoke("evaluate", str(preds), "--manifest", str(manifest), "--out", str(out), "--run-id", "r1")
    assert run.exit_code == 0, run.output
    report = orjson.loads(out.read_bytes())
    assert report["run_id"] == "r1"
    for entry, patch in zip(report["instances"], (GOLD, WRONG), strict=True):
        instance_id = entry["instance_id"]
        assert entry["log_path"] == f"logs/run_evaluation/r1/org__model/{instance_id}/test_output.txt"
        log = out.parent / entry["log_path"]
        whole = expected_test_output(patch)
        assert len(whole) > LOG_TAIL
        assert log.read_bytes() == whole.encode()
        assert log.read_text().startswith(grading.START_TEST_OUTPUT)
        assert grading.START_TEST_OUTPUT not in entry["log_tail"]  # the tail stays bounded, and lost the marker
        assert len(entry["log_tail"]) == LOG_TAIL
        assert (log.parent / "run_instance.log").read_text() == ">>>>> Applied Patch (git apply --verbose)\n"
        assert orjson.loads((log.parent / "report.json").read_bytes()) == entry
        assert not [p for p in log.parent.iterdir() if p.name.endswith(".tmp")]
    assert [e["resolved"] for e in report["instances"]] == [True, False]


def test_evaluate_without_out_logs_under_the_working_directory(long_fake: FakeRuntime, tmp_path: Path) -> None:
    manifest = write_jsonl(tmp_path / "m.jsonl", [row("o__r-1")])
    run = invoke("evaluate", str(predictions(tmp_path, {"o__r-1": GOLD})), "--manifest", str(manifest), "--json")
    assert run.exit_code == 0, run.output
    payload = orjson.loads(run.stdout)
    run_id = payload["run_id"]
    assert run_id and "/" not in run_id  # derived from the time
    path = payload["instances"][0]["log_path"]
    assert path == f"logs/run_evaluation/{run_id}/m/o__r-1/test_output.txt"
    assert (tmp_path / path).read_bytes() == expected_test_output(GOLD).encode()


def test_validate_writes_gold_and_empty_logs(long_fake: FakeRuntime, tmp_path: Path) -> None:
    from polar_cli.swe import grading

    manifest = write_jsonl(tmp_path / "m.jsonl", [row("o__r-1")])
    out = tmp_path / "v.json"
    run = invoke("validate", str(manifest), "--out", str(out), "--run-id", "v-1")
    assert run.exit_code == 0, run.output
    report = orjson.loads(out.read_bytes())
    assert report["run_id"] == "v-1"
    entry = report["instances"][0]
    for key, model, patch in (("gold", "gold", GOLD), ("without_fix", "empty", "")):
        assert entry[key]["log_path"] == f"logs/run_evaluation/v-1/{model}/o__r-1/test_output.txt"
        log = tmp_path / entry[key]["log_path"]
        assert log.read_bytes() == expected_test_output(patch).encode()
        assert log.read_text().startswith(grading.START_TEST_OUTPUT)
        assert orjson.loads((log.parent / "report.json").read_bytes()) == entry[key]
    # no patch was applied without the fix: its apply output is empty
    assert (tmp_path / "logs/run_evaluation/v-1/empty/o__r-1/run_instance.log").read_bytes() == b""


@pytest.mark.parametrize("command", ["evaluate", "validate"])
def test_a_log_that_cannot_be_written_fails_the_command(long_fake: FakeRuntime, tmp_path: Path, command: str) -> None:
    manifest = write_jsonl(tmp_path / "m.jsonl", [row("o__r-1")])
    (tmp_path / "logs").write_text("a file where the log directory goes")
    out = tmp_path / "report.json"
    args = [str(predictions(tmp_path, {"o__r-1": GOLD})), "--manifest"] if command == "evaluate" else []
    run = invoke(command, *args, str(manifest), "--out", str(out))
    assert run.exit_code == 1, run.output
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    assert not out.exists()


@pytest.mark.parametrize("command", ["evaluate", "validate"])
def test_a_bad_run_id_is_bad_usage(long_fake: FakeRuntime, tmp_path: Path, command: str) -> None:
    manifest = write_jsonl(tmp_path / "m.jsonl", [row("o__r-1")])
    args = [str(predictions(tmp_path, {"o__r-1": GOLD})), "--manifest"] if command == "evaluate" else []
    run = invoke(command, *args, str(manifest), "--run-id", "../escape")
    assert run.exit_code == 2
    assert "--run-id" in run.stderr
    assert long_fake.containers == []


@pytest.mark.parametrize(("flags", "network"), [([], "bridge"), (["--network", "none"], "none")])
def test_network_option_reaches_the_containers_and_the_report(
    fake: FakeRuntime, manifest: Path, tmp_path: Path, flags: list[str], network: str
) -> None:
    preds = str(predictions(tmp_path, {"o__r-1": GOLD}))
    run = invoke("evaluate", preds, "--manifest", str(manifest), "--json", *flags)
    assert run.exit_code == 0, run.output
    payload = orjson.loads(run.stdout)
    assert (payload["network"], payload["instances"][0]["network"]) == (network, network)
    run = invoke("validate", str(manifest), "--instance-ids", "o__r-1", "--json", *flags)
    assert run.exit_code == 0, run.output
    assert orjson.loads(run.stdout)["network"] == network
    assert {spec.network for spec in fake.specs} == {network}

"""`polar evaluate PREDICTIONS --manifest M`: grade SWE-bench-style predictions in fresh containers.

Exit codes: 0 when every instance was evaluated (resolved or not), 1 when evaluation itself failed somewhere, 2 for
bad usage, bad predictions or a bad manifest.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from polar_cli.commands import swe_jobs
from polar_cli.commands.common import FAILED, JsonOpt, exit_codes
from polar_cli.swe.evaluate import DEFAULT_NETWORK, DEFAULT_TIMEOUT, Evaluation, evaluate_many
from polar_cli.swe.manifest import load_manifest
from polar_cli.swe.predictions import evaluation_jobs, evaluation_report, load_predictions


def _tests_cell(results: Sequence[str], failures: Sequence[str]) -> str:
    total = len(results) + len(failures)
    return f"{len(results)}/{total}"


def _print_evaluations(results: Sequence[Evaluation]) -> None:
    from rich.console import Console
    from rich.table import Table

    style = {"resolved": "green", "unresolved": "yellow", "error": "red"}
    table = Table(title="polar evaluate")
    for column in ("instance", "model", "outcome", "FAIL_TO_PASS", "PASS_TO_PASS", "reason"):
        table.add_column(column, overflow="fold")
    for r in results:
        tests = r.grade.tests
        f2p = _tests_cell(tests.fail_to_pass_success, tests.fail_to_pass_failure) if tests else "-"
        p2p = _tests_cell(tests.pass_to_pass_success, tests.pass_to_pass_failure) if tests else "-"
        outcome = f"[{style[r.outcome]}]{r.outcome}[/]"
        reason = r.reason or r.grade.reason or ""
        if r.tamper is not None and r.tamper.reverted:
            reason = "; ".join(filter(None, [reason, f"reverted: {', '.join(r.tamper.reverted)}"]))
        table.add_row(r.instance_id, r.model, outcome, f2p, p2p, reason)
    console = Console()
    console.print(table)
    resolved = sum(r.resolved for r in results)
    errors = sum(r.outcome == "error" for r in results)
    console.print(f"resolved {resolved}/{len(results)}" + (f", {errors} could not be evaluated" if errors else ""))


def evaluate(
    predictions: Annotated[Path, typer.Argument(help="SWE-bench predictions (.jsonl or .json).")],
    manifest: swe_jobs.ManifestArg,
    out: Annotated[
        Path | None, typer.Option(help="Write the full report (per-test results) to this JSON file.")
    ] = None,
    json_: JsonOpt = False,
    image_template: swe_jobs.TemplateOpt = None,
    timeout: swe_jobs.TimeoutOpt = DEFAULT_TIMEOUT,
    workers: swe_jobs.WorkersOpt = 1,
    run_id: swe_jobs.RunIdOpt = None,
    network: swe_jobs.NetworkOpt = DEFAULT_NETWORK,
    tamper: swe_jobs.TamperOpt = None,
    swe_bench_exact: swe_jobs.ExactOpt = False,
) -> None:
    """Grade SWE-bench-style predictions (instance_id, model_patch, model_name_or_path) exactly as SWE-bench does,
    except that by default a patch that changes test infrastructure its test patch does not own (a conftest.py,
    pytest or tox config, test files) is unresolved (--tamper reject); --swe-bench-exact turns that check off.

    Each instance's whole logs go to logs/run_evaluation/RUN_ID/MODEL/INSTANCE_ID/ beside --out (else under the
    working directory); the report links each one as ``log_path``.
    """
    with exit_codes():
        swe_jobs.check_options(timeout, workers, out)
        logs = swe_jobs.run_logs(out, run_id)
        instances = load_manifest(manifest)
        mode = swe_jobs.tamper_mode(tamper, swe_bench_exact)
        jobs = evaluation_jobs(
            load_predictions(predictions), instances, image_template, timeout, network=network, tamper=mode
        )
        results = swe_jobs.run_jobs(
            evaluate_many,
            jobs,
            workers,
            lambda r: f"{r.instance_id}: {r.outcome} ({r.seconds:.1f} s)",
            save=logs.write,
        )
        payload = evaluation_report(results, logs, network=network)
        swe_jobs.report(payload, out, json_, lambda: _print_evaluations(results))
    if payload["error_instances"]:
        raise typer.Exit(FAILED)

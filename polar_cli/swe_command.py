"""`polar evaluate` and `polar validate`: SWE-bench grading of predictions, and gold-patch validation of manifests.

Exit codes: 0 when every instance was evaluated (resolved or not; for validate: every instance valid), 1 when
evaluation itself failed somewhere (or, for validate, an instance is broken), 2 for bad usage or a bad manifest.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import orjson
import typer

from polar_cli.errors import ConfigError, PolarError
from polar_cli.swe.evaluate import DEFAULT_TIMEOUT, EvalJob, EvalOptions, Evaluation, evaluate_many
from polar_cli.swe.images import instance_image
from polar_cli.swe.manifest import Instance, load_manifest, parse_shard, select
from polar_cli.swe.validate import Validation, validate_many

ManifestArg = Annotated[str, typer.Option("--manifest", help="Manifest: .json/.jsonl/.parquet or a datasets name.")]
TemplateOpt = Annotated[
    str | None,
    typer.Option(help="Image for rows without `image`: swe-gym, swe-bench, or a format string over {instance_id}."),
]
TimeoutOpt = Annotated[float, typer.Option(help="Per-instance test timeout in seconds.")]
WorkersOpt = Annotated[int, typer.Option(help="Instances evaluated at once.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


@dataclass(frozen=True, slots=True)
class Prediction:
    instance_id: str
    model_patch: str | None
    model: str


def _prediction(row: Any, where: str) -> Prediction:
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: expected an object, got {type(row).__name__}")
    instance_id = row.get("instance_id")
    if not isinstance(instance_id, str) or not instance_id:
        raise ConfigError(f"{where}: instance_id: missing or not a string")
    where = f"{where} ({instance_id})"
    if "model_patch" not in row:
        raise ConfigError(f"{where}: model_patch: missing")
    patch, model = row["model_patch"], row.get("model_name_or_path", "")
    if patch is not None and not isinstance(patch, str):
        raise ConfigError(f"{where}: model_patch: expected a string or null, got {type(patch).__name__}")
    if not isinstance(model, str):
        raise ConfigError(f"{where}: model_name_or_path: expected a string")
    return Prediction(instance_id, patch, model)


def load_predictions(path: Path) -> list[Prediction]:
    """SWE-bench predictions: .jsonl rows, or .json holding a list of rows or an object keyed by instance_id."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"predictions {path}: {exc.strerror or exc}") from exc
    try:
        if path.suffix == ".jsonl":
            rows: list[Any] = [orjson.loads(line) for line in data.splitlines() if line.strip()]
        else:
            loaded = orjson.loads(data)
            rows = list(loaded.values()) if isinstance(loaded, dict) else loaded
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"predictions {path}: not valid JSON: {exc}") from exc
    if not isinstance(rows, list):
        raise ConfigError(f"predictions {path}: expected a list of predictions")
    predictions = [_prediction(row, f"predictions {path} row {i}") for i, row in enumerate(rows)]
    seen: set[str] = set()
    for i, p in enumerate(predictions):
        if p.instance_id in seen:
            raise ConfigError(f"predictions {path} row {i} ({p.instance_id}): instance_id: predicted twice")
        seen.add(p.instance_id)
    return predictions


def _ids(values: Sequence[str] | None) -> list[str] | None:
    if not values:
        return None
    return [part for value in values for part in value.split(",") if part]


def _runtime() -> Any:
    from polar_cli.runtime.docker import DockerRuntime

    return DockerRuntime()


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"Error: {message}", err=True)
    return typer.Exit(code)


R = TypeVar("R")


def _run_jobs(
    run_many: Callable[..., list[R]], jobs: Sequence[Any], workers: int, describe: Callable[[R], str]
) -> list[R]:
    """Open the runtime (exit 1 if it cannot be), run the jobs, one progress line per finished job."""
    try:
        runtime = _runtime()
    except PolarError as exc:
        raise _fail(str(exc), 1) from exc
    done = [0]

    def report(result: R) -> None:
        _progress(done, len(jobs), describe(result))

    with runtime:
        return run_many(runtime, jobs, workers=workers, on_done=report)


def _progress(done: list[int], total: int, line: str) -> None:
    done[0] += 1
    print(f"[{done[0]}/{total}] {line}", file=sys.stderr, flush=True)


# ---- evaluate ----------------------------------------------------------------------------------------------------


def _evaluation_jobs(
    predictions: list[Prediction], instances: list[Instance], template: str | None, timeout: float
) -> list[EvalJob]:
    by_id = {i.instance_id: i for i in instances}
    unknown = [p.instance_id for p in predictions if p.instance_id not in by_id]
    if unknown:
        raise ConfigError(f"predictions for instances not in the manifest: {', '.join(unknown)}")
    jobs = []
    for p in predictions:
        instance = by_id[p.instance_id]
        options = EvalOptions(image=instance_image(instance, template), timeout=timeout)
        jobs.append(EvalJob(instance, p.model_patch, options, p.model))
    return jobs


def evaluation_report(results: Sequence[Evaluation]) -> dict[str, Any]:
    """The run report: counts and id lists (as SWE-bench's run report names them), then one entry per instance."""
    ids = {kind: [r.instance_id for r in results if r.outcome == kind] for kind in ("resolved", "unresolved", "error")}
    return {
        "total_instances": len(results),
        "resolved_instances": len(ids["resolved"]),
        "unresolved_instances": len(ids["unresolved"]),
        "error_instances": len(ids["error"]),
        "resolved_ids": ids["resolved"],
        "unresolved_ids": ids["unresolved"],
        "error_ids": ids["error"],
        "instances": [r.to_dict() for r in results],
    }


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
        table.add_row(r.instance_id, r.model, outcome, f2p, p2p, r.reason or r.grade.reason or "")
    console = Console()
    console.print(table)
    resolved = sum(r.resolved for r in results)
    errors = sum(r.outcome == "error" for r in results)
    console.print(f"resolved {resolved}/{len(results)}" + (f", {errors} could not be evaluated" if errors else ""))


def evaluate(
    predictions: Annotated[Path, typer.Argument(help="SWE-bench predictions (.jsonl or .json).")],
    manifest: ManifestArg,
    out: Annotated[
        Path | None, typer.Option(help="Write the full report (per-test results) to this JSON file.")
    ] = None,
    json_: JsonOpt = False,
    image_template: TemplateOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    workers: WorkersOpt = 1,
) -> None:
    """Grade SWE-bench-style predictions (instance_id, model_patch, model_name_or_path) exactly as SWE-bench does."""
    try:
        if timeout <= 0 or workers < 1:
            raise ConfigError("--timeout must be positive and --workers at least 1")
        if out is not None and not out.parent.is_dir():
            raise ConfigError(f"--out {out}: directory {out.parent} does not exist")
        jobs = _evaluation_jobs(load_predictions(predictions), load_manifest(manifest), image_template, timeout)
    except ConfigError as exc:
        raise _fail(str(exc), 2) from exc
    results = _run_jobs(evaluate_many, jobs, workers, lambda r: f"{r.instance_id}: {r.outcome} ({r.seconds:.1f} s)")
    payload = evaluation_report(results)
    if out is not None:
        out.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    if json_:
        typer.echo(orjson.dumps(payload).decode())
    else:
        _print_evaluations(results)
    if payload["error_instances"]:
        raise typer.Exit(1)


# ---- validate ----------------------------------------------------------------------------------------------------


def _print_validations(results: Sequence[Validation]) -> None:
    from rich.console import Console
    from rich.table import Table

    style = {"valid": "green", "broken": "red", "error": "red"}
    table = Table(title="polar validate")
    for column in ("instance", "status", "gold", "without fix", "reasons"):
        table.add_column(column, overflow="fold")
    for v in results:
        status = f"[{style[v.status]}]{v.status}[/]"
        table.add_row(v.instance_id, status, v.gold.outcome, v.without_fix.outcome, "; ".join(v.reasons))
    console = Console()
    console.print(table)
    valid = sum(v.status == "valid" for v in results)
    console.print(f"valid {valid}/{len(results)}")


def _validate_through_harness(
    manifest: str,
    harness: str,
    instance_ids: list[str] | None,
    repos: list[str] | None,
    limit: int | None,
    shard: str | None,
    timeout: float,
    workers: int,
    json_: bool,
) -> None:
    from polar_cli.swe.harness_validate import validate_through_harness

    selection: dict[str, Any] = {}
    if _ids(instance_ids):
        selection["instance_ids"] = _ids(instance_ids)
    if _ids(repos):
        selection["repos"] = _ids(repos)
    if limit is not None:
        selection["limit"] = limit
    if shard:
        selection["shard"] = shard
    try:
        results = validate_through_harness(manifest, harness, selection=selection, workers=workers, timeout=timeout)
    except ConfigError as exc:
        raise _fail(str(exc), 2) from exc
    except PolarError as exc:
        raise _fail(str(exc), 1) from exc
    payload = {
        "harness": harness,
        "total_instances": len(results),
        "accepted_instances": sum(r.accepted for r in results),
        "broken": {r.instance_id: r.reason for r in results if not r.accepted},
    }
    if json_:
        typer.echo(orjson.dumps(payload).decode())
    else:
        for r in results:
            typer.echo(f"{r.instance_id}: {'accepted' if r.accepted else 'NOT accepted: ' + str(r.reason)}")
        typer.echo(f"accepted {payload['accepted_instances']}/{len(results)} through {harness}")
    if not results or payload["accepted_instances"] != len(results):
        raise typer.Exit(1)


def validate(
    manifest: Annotated[str, typer.Argument(help="Manifest: .json/.jsonl/.parquet or a datasets name.")],
    harness: Annotated[
        str | None, typer.Option(help="Validate through this harness with the gold engine (the whole pipeline).")
    ] = None,
    instance_ids: Annotated[
        list[str] | None, typer.Option(help="Only these instances (repeat or comma-separate).")
    ] = None,
    repos: Annotated[
        list[str] | None, typer.Option(help="Only instances of these repos (repeat or comma-separate).")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N selected instances.")] = None,
    shard: Annotated[str | None, typer.Option(help="Only shard i of N (i/N, 0 <= i < N) of the selection.")] = None,
    image_template: TemplateOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    workers: WorkersOpt = 1,
    out: Annotated[Path | None, typer.Option(help="Write the full report to this JSON file.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Check a manifest: the gold patch must resolve each instance and the empty patch must not.

    With --harness, the gold engine drives that real harness instead, and every instance must come out accepted.
    """
    if harness is not None:
        _validate_through_harness(manifest, harness, instance_ids, repos, limit, shard, timeout, workers, json_)
        return
    try:
        if timeout <= 0 or workers < 1:
            raise ConfigError("--timeout must be positive and --workers at least 1")
        if out is not None and not out.parent.is_dir():
            raise ConfigError(f"--out {out}: directory {out.parent} does not exist")
        chosen = select(
            load_manifest(manifest),
            instance_ids=_ids(instance_ids),
            repos=_ids(repos),
            limit=limit,
            shard=parse_shard(shard) if shard else None,
        )
        if not chosen:
            raise ConfigError(f"manifest {manifest}: no instance selected")
        jobs = [(i, EvalOptions(image=instance_image(i, image_template), timeout=timeout)) for i in chosen]
    except ConfigError as exc:
        raise _fail(str(exc), 2) from exc
    results = _run_jobs(validate_many, jobs, workers, lambda v: f"{v.instance_id}: {v.status}")
    payload = {
        "total_instances": len(results),
        "valid_instances": sum(v.status == "valid" for v in results),
        "broken_ids": [v.instance_id for v in results if v.status == "broken"],
        "error_ids": [v.instance_id for v in results if v.status == "error"],
        "instances": [v.to_dict() for v in results],
    }
    if out is not None:
        out.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    if json_:
        typer.echo(orjson.dumps(payload).decode())
    else:
        _print_validations(results)
    if payload["valid_instances"] != len(results):
        raise typer.Exit(1)

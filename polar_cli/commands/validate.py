"""`polar validate MANIFEST [--harness H]`: the gold patch must resolve each instance and the empty patch must not.

With ``--harness``, the gold engine drives that real harness through the whole generate pipeline instead
(`generate.validate`), and every instance must come out accepted.

Exit codes: 0 when every instance is valid (accepted), 1 when one is broken or could not be checked, 2 for bad usage.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from polar_cli.commands.common import FAILED, JsonOpt, exit_codes
from polar_cli.commands.swe_jobs import (
    ExactOpt,
    NetworkOpt,
    RunIdOpt,
    TamperOpt,
    TemplateOpt,
    TimeoutOpt,
    WorkersOpt,
    check_options,
    ids,
    report,
    run_jobs,
    run_logs,
    tamper_mode,
)
from polar_cli.errors import ConfigError
from polar_cli.swe.eval_logs import RunLogs
from polar_cli.swe.evaluate import DEFAULT_NETWORK, DEFAULT_TIMEOUT, EvalOptions
from polar_cli.swe.images import instance_image
from polar_cli.swe.manifest import load_manifest, parse_shard, select
from polar_cli.swe.tamper import TamperMode
from polar_cli.swe.validate import Validation, validate_many


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
    tamper: TamperMode,
    logs: RunLogs,
    out: Path | None,
    harness_config: str | None,
) -> None:
    from polar_cli.generate.validate import validate_through_harness

    selection: dict[str, Any] = {}
    if ids(instance_ids):
        selection["instance_ids"] = ids(instance_ids)
    if ids(repos):
        selection["repos"] = ids(repos)
    if limit is not None:
        selection["limit"] = limit
    if shard:
        selection["shard"] = shard
    with exit_codes():
        results = validate_through_harness(
            manifest,
            harness,
            selection=selection,
            workers=workers,
            timeout=timeout,
            tamper=tamper,
            logs=logs,
            harness_config=harness_config,
        )
    payload = {
        "harness": harness,
        "run_id": logs.run_id,
        "total_instances": len(results),
        "accepted_instances": sum(r.accepted for r in results),
        "broken": {r.instance_id: r.reason for r in results if not r.accepted},
        # each session's test_output.txt, relative to --out's directory (else the working directory)
        "log_paths": {r.instance_id: r.log_path for r in results},
    }

    def show() -> None:
        for r in results:
            typer.echo(f"{r.instance_id}: {'accepted' if r.accepted else 'NOT accepted: ' + str(r.reason)}")
        typer.echo(f"accepted {payload['accepted_instances']}/{len(results)} through {harness}")

    with exit_codes():
        report(payload, out, json_, show)
    if not results or payload["accepted_instances"] != len(results):
        raise typer.Exit(FAILED)


def _validate_harbor(
    source: str,
    instance_ids: list[str] | None,
    limit: int | None,
    workers: int,
    out: Path | None,
    json_: bool,
    run_id: str | None,
) -> None:
    """Harbor tasks (a task folder or a folder of them): each oracle earns reward 1, the tests fail without it."""
    from polar_cli.harbor.validate import validate_source

    with exit_codes():
        logs = run_logs(out, run_id)
        results = validate_source(
            source,
            names=ids(instance_ids),
            limit=limit,
            workers=workers,
            logs_root=logs.root,
            run_id=logs.run_id,
            echo=lambda line: typer.echo(line, err=True),
        )
        payload = {
            "run_id": logs.run_id,
            "task_kind": "harbor",
            "total_instances": len(results),
            "valid_instances": sum(v.status == "valid" for v in results),
            "broken_ids": [v.task for v in results if v.status == "broken"],
            "error_ids": [v.task for v in results if v.status == "error"],
            "instances": [v.to_dict() for v in results],
        }

        def show() -> None:
            for v in results:
                typer.echo(f"{v.task}: {v.status}" + (f" ({'; '.join(v.reasons)})" if v.reasons else ""))
            typer.echo(f"valid {payload['valid_instances']}/{len(results)} (harbor tasks)")

        report(payload, out, json_, show)
    if not results or payload["valid_instances"] != len(results):
        raise typer.Exit(FAILED)


def validate(
    manifest: Annotated[
        str, typer.Argument(help="Manifest: .json/.jsonl/.parquet, a datasets name, or a folder of Harbor tasks.")
    ],
    harness: Annotated[
        str | None, typer.Option(help="Validate through this harness with the gold engine (the whole pipeline).")
    ] = None,
    harness_config: Annotated[
        str | None, typer.Option(help="With --harness: YAML defining custom harnesses (polar run --harness-config).")
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
    run_id: RunIdOpt = None,
    network: NetworkOpt = DEFAULT_NETWORK,
    tamper: TamperOpt = None,
    swe_bench_exact: ExactOpt = False,
) -> None:
    """Check a manifest: the gold patch must resolve each instance and the empty patch must not.

    The gold patch is graded as `polar generate` grades an attempt, tamper check included (--tamper, default reject):
    an instance whose gold patch changes test infrastructure its test patch does not own is broken for a generate
    run with the default recipe; --swe-bench-exact (--tamper off) grades it as SWE-bench does.

    Each evaluation's whole logs go to logs/run_evaluation/RUN_ID/{gold,empty}/INSTANCE_ID/ beside --out (else under
    the working directory); the report links each one as ``log_path``.

    With --harness, the gold engine drives that real harness instead, and every instance must come out accepted;
    each session's evaluation logs go to logs/run_evaluation/RUN_ID/MODEL/SESSION_ID/ in the same place.
    """
    with exit_codes():
        mode = tamper_mode(tamper, swe_bench_exact)
    if harness is None and Path(manifest).is_dir():
        _validate_harbor(manifest, instance_ids, limit, workers, out, json_, run_id)
        return
    if harness is not None:
        with exit_codes():
            logs = run_logs(out, run_id)
        args = (manifest, harness, instance_ids, repos, limit, shard, timeout, workers, json_, mode, logs, out)
        _validate_through_harness(*args, harness_config)
        return
    with exit_codes():
        check_options(timeout, workers, out)
        logs = run_logs(out, run_id)
        chosen = select(
            load_manifest(manifest),
            instance_ids=ids(instance_ids),
            repos=ids(repos),
            limit=limit,
            shard=parse_shard(shard) if shard else None,
        )
        if not chosen:
            raise ConfigError(f"manifest {manifest}: no instance selected")
        jobs = [
            (i, EvalOptions(image=instance_image(i, image_template), timeout=timeout, network=network, tamper=mode))
            for i in chosen
        ]
        results = run_jobs(
            validate_many, jobs, workers, lambda v: f"{v.instance_id}: {v.status}", save=lambda v: v.write_logs(logs)
        )
        payload = {
            "run_id": logs.run_id,
            "network": network,
            "total_instances": len(results),
            "valid_instances": sum(v.status == "valid" for v in results),
            "broken_ids": [v.instance_id for v in results if v.status == "broken"],
            "error_ids": [v.instance_id for v in results if v.status == "error"],
            "instances": [v.to_dict(logs) for v in results],
        }
        report(payload, out, json_, lambda: _print_validations(results))
    if payload["valid_instances"] != len(results):
        raise typer.Exit(FAILED)

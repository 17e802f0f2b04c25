"""`polar submit` and `polar status`: a person's or a script's view of a running `polar serve`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from polar_cli.commands.common import FAILED, USAGE, fail
from polar_cli.serve.config import TOKEN_ENV

SERVER_ENV = "POLAR_SERVER"
DEFAULT_SERVER = "http://127.0.0.1:8200"
ServerOption = Annotated[
    str | None, typer.Option("--server", help=f"The service's URL (else ${SERVER_ENV}, else {DEFAULT_SERVER})")
]


def _client(server: str | None) -> Any:
    from polar_cli.client import PolarClient

    return PolarClient(server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER, token=os.environ.get(TOKEN_ENV))


def _read_task(path: Path) -> list[dict[str, Any]]:
    try:
        data = yaml.safe_load(path.read_text())  # JSON is YAML
    except OSError as exc:
        raise fail(f"{path}: {exc.strerror or exc}", USAGE) from exc
    except yaml.YAMLError as exc:
        raise fail(f"{path}: not valid YAML or JSON: {exc}", USAGE) from exc
    tasks = data if isinstance(data, list) else [data]
    if not tasks or not all(isinstance(t, dict) for t in tasks):
        raise fail(f"{path}: expected a task (a mapping) or a list of tasks", USAGE)
    return tasks


def _summary(raw: dict[str, Any]) -> str:
    counts = " ".join(f"{k}={v}" for k, v in (raw.get("counts") or {}).items() if v)
    mean = raw.get("mean_reward")
    reward = f"mean_reward={mean:.3f}" if isinstance(mean, float) else "mean_reward=-"
    return f"{raw['task_id']}: {raw['state']} {raw.get('finished_sessions', 0)}/{raw['num_samples']} {counts} {reward}"


def submit(
    task: Annotated[Path, typer.Argument(help="TASK.yaml or TASK.json: one TaskRequest, or a list of them")],
    server: ServerOption = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until every task is done")] = False,
    timeout: Annotated[float | None, typer.Option(help="With --wait: give up after this many seconds")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the service's answers as JSON lines")] = False,
) -> None:
    """Submit tasks to a running `polar serve`; exit 1 when the service refused one or --wait timed out."""
    import httpx

    from polar_cli.client import ServeError

    tasks = _read_task(task)
    refused = 0
    with _client(server) as client:
        try:
            ids = []
            for body in tasks:
                try:
                    status = client.submit(body)
                except ServeError as exc:
                    refused += 1
                    typer.echo(f"error: task {body.get('task_id')!r}: {exc}", err=True)
                    continue
                ids.append(status["task_id"])
                typer.echo(
                    json.dumps(status)
                    if as_json
                    else _summary(status) + ("" if status.get("created") else " (already submitted)")
                )
            if wait and ids:
                for result in client.iter_results(ids, timeout=timeout):
                    typer.echo(json.dumps(result.raw) if as_json else _summary(result.raw))
        except TimeoutError as exc:
            raise fail(exc, FAILED) from exc
        except httpx.HTTPError as exc:
            raise fail(f"the service at {client._http.base_url} cannot be reached: {exc}", FAILED) from exc
    if refused:
        raise typer.Exit(FAILED)


def status(
    server: ServerOption = None,
    task_id: Annotated[str | None, typer.Argument(help="One task's status (default: the service's)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the service's answer as JSON")] = False,
) -> None:
    """The service's pools, queue, sessions and deliveries, or one task's status."""
    import httpx

    from polar_cli.client import ServeError

    with _client(server) as client:
        try:
            raw = client.get(task_id).raw if task_id else client.status()
        except ServeError as exc:
            raise fail(exc, FAILED) from exc
        except httpx.HTTPError as exc:
            raise fail(f"the service at {client._http.base_url} cannot be reached: {exc}", FAILED) from exc
    if as_json:
        typer.echo(json.dumps(raw, indent=2))
    elif task_id:
        typer.echo(_summary(raw))
        for s in raw.get("sessions") or []:
            typer.echo(f"  #{s['index']} {s['status']} reward={s['reward']} {s.get('reason') or ''}".rstrip())
    else:
        for key in ("node", "paused", "weight_version", "queue", "pools", "sessions", "tasks", "deliveries"):
            typer.echo(f"{key}: {json.dumps(raw.get(key))}")

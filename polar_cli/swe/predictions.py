"""SWE-bench predictions (``instance_id``, ``model_patch``, ``model_name_or_path``) read and checked row by row, the
evaluation jobs they make against a manifest, and the run report in SWE-bench's own key names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from polar_cli.errors import ConfigError
from polar_cli.swe.eval_logs import RunLogs
from polar_cli.swe.evaluate import DEFAULT_NETWORK, EvalJob, EvalOptions, Evaluation
from polar_cli.swe.images import instance_image
from polar_cli.swe.manifest import Instance
from polar_cli.swe.tamper import TamperMode


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


def evaluation_jobs(
    predictions: list[Prediction],
    instances: list[Instance],
    template: str | None,
    timeout: float,
    *,
    network: str = DEFAULT_NETWORK,
    tamper: TamperMode = "reject",
) -> list[EvalJob]:
    by_id = {i.instance_id: i for i in instances}
    unknown = [p.instance_id for p in predictions if p.instance_id not in by_id]
    if unknown:
        raise ConfigError(f"predictions for instances not in the manifest: {', '.join(unknown)}")
    jobs = []
    for p in predictions:
        instance = by_id[p.instance_id]
        image = instance_image(instance, template)
        options = EvalOptions(image=image, timeout=timeout, network=network, tamper=tamper)
        jobs.append(EvalJob(instance, p.model_patch, options, p.model))
    return jobs


def evaluation_report(
    results: Sequence[Evaluation], logs: RunLogs | None = None, *, network: str | None = None
) -> dict[str, Any]:
    """The run report: counts and id lists (as SWE-bench's run report names them), then one entry per instance
    (with its ``log_path`` and the report's ``run_id`` when ``logs`` says where the logs were written), and the
    grading containers' ``network`` when given (each instance's entry names the one its container had)."""
    ids = {kind: [r.instance_id for r in results if r.outcome == kind] for kind in ("resolved", "unresolved", "error")}
    head = {} if logs is None else {"run_id": logs.run_id}
    if network is not None:
        head["network"] = network
    return {
        **head,
        "total_instances": len(results),
        "resolved_instances": len(ids["resolved"]),
        "unresolved_instances": len(ids["unresolved"]),
        "error_instances": len(ids["error"]),
        "resolved_ids": ids["resolved"],
        "unresolved_ids": ids["unresolved"],
        "error_ids": ids["error"],
        "instances": [r.to_dict() if logs is None else logs.entry(r) for r in results],
    }

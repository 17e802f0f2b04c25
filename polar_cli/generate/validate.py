"""`polar validate M --harness H`: the gold engine through a real harness must get every instance accepted.

This is `polar generate` with the gold engine and one harness over the manifest, in a scratch run directory: it
proves the whole path for each instance (image, harness wiring, gateway, capture, grading, trajectory), not just
the gold patch. An instance that is not accepted is listed with the run's reason.

With ``logs`` (the command's `swe.eval_logs.RunLogs`: beside ``--out``, else under the working directory), each
session's whole evaluation logs are kept there, as ``polar validate`` without a harness keeps its own:
``logs/run_evaluation/<run_id>/<model>/<session_id>/`` (the generate layout, `session_logs`), and each verdict
links its ``log_path``.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from polar_cli.config import parse_recipe
from polar_cli.swe.eval_logs import RUN_EVALUATION, RunLogs

INSTRUCTION = "The repository {repo} is checked out in {workdir}. Fix the following issue there.\n\n{problem_statement}"


@dataclass(frozen=True, slots=True)
class HarnessValidation:
    instance_id: str
    accepted: bool
    reason: str | None
    # test_output.txt of the session's evaluation, relative to the logs' root; None when it was not graded
    log_path: str | None = None


def validate_through_harness(
    manifest: str,
    harness: str,
    *,
    selection: dict[str, Any],
    workers: int,
    timeout: float,
    out: Path | None = None,
    tamper: str = "reject",
    logs: RunLogs | None = None,
    harness_config: str | None = None,
) -> list[HarnessValidation]:
    """Run the gold engine through ``harness`` (built-in, or defined in ``harness_config``, a `--harness-config`
    file) over the selected instances; one verdict per instance."""
    from polar_cli.generate.run import generate
    from polar_cli.harness.custom import load_harness_config

    custom = load_harness_config(harness_config) if harness_config else {}

    recipe = parse_recipe(
        {
            "name": logs.run_id if logs is not None else f"validate-{harness}",
            "manifest": {"source": str(Path(manifest).resolve()) if Path(manifest).exists() else manifest, **selection},
            "custom_harnesses": {name: c.model_dump() for name, c in custom.items() if name == harness},
            "harnesses": [harness],
            "attempts": 1,
            "instruction": INSTRUCTION,
            "engine": {"kind": "gold", "tokenizer": "qwen3"},
            "concurrency": {"init": workers, "run": workers, "postrun": workers, "ready": workers},
            "timeouts": {"session": timeout, "eval": timeout},
            "eval": {"tamper": tamper},
            "output": {"formats": ["jsonl"]},
        },
        source="validate --harness",
    )
    with tempfile.TemporaryDirectory(prefix="polar-validate-") as scratch:
        run_dir = out or Path(scratch)
        generate(recipe, run_dir, live=False)
        verdicts: dict[str, HarnessValidation] = {}
        for name in ("corpus.jsonl", "rejects.jsonl", "errors.jsonl"):
            path = run_dir / name
            if not path.exists():
                continue
            for line in path.read_bytes().splitlines():
                row = orjson.loads(line)
                iid = str(row.get("instance_id"))
                log_path = (row.get("eval") or {}).get("log_path")
                reason = row.get("reason") or row.get("error")
                verdicts[iid] = HarnessValidation(iid, bool(row.get("accepted")), reason, log_path)
        if logs is not None:
            keep_logs(run_dir, logs)
    return sorted(verdicts.values(), key=lambda v: v.instance_id)


def keep_logs(run_dir: Path, logs: RunLogs) -> None:
    """Copy the run's evaluation logs (``<run_dir>/logs/run_evaluation/<run_id>``) to the same place under logs.root."""
    source = run_dir / RUN_EVALUATION / logs.run_id
    target = logs.root / RUN_EVALUATION / logs.run_id
    if source.is_dir() and source.resolve() != target.resolve():
        shutil.copytree(source, target, dirs_exist_ok=True)

"""SWE-Gym / SWE-bench manifests: rows in, validated `Instance`s out, and the selection flags.

A manifest is a .json (a list of rows), .jsonl or .parquet file, or a Hugging Face datasets name
(``owner/name`` or ``owner/name:split``) where a hub is reachable. Field names are SWE-bench's. Every problem is a
`ConfigError` naming the row (0-based index, as ``datasets`` counts, and instance_id) and the field.

SWE-bench 5 rows also carry ``eval_script``, ``log_parser`` and ``eval_type``; they are kept as they are, with the
parser name checked against swebench 5.0.2's ``PARSER_REGISTRY`` (and ours) and the type against its ``EvalType``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from polar_cli.errors import ConfigError
from polar_cli.swe.grading import EVAL_TYPES, EvalType
from polar_cli.swe.logparse import known_parser

_REQUIRED_TEXT = ("repo", "base_commit", "problem_statement", "patch", "test_patch")
_OPTIONAL_TEXT = ("version", "environment_setup_commit", "image", "test_cmd")


@dataclass(frozen=True, slots=True)
class BuildSpec:
    """How to build an instance image locally; paths are resolved against the manifest's directory."""

    context: Path
    dockerfile: str = "Dockerfile"
    args: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Instance:
    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str  # the gold patch
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    version: str = ""
    environment_setup_commit: str = ""
    image: str | None = None
    test_cmd: str | None = None
    build: BuildSpec | None = None
    # SWE-bench 5 rows: the whole eval script (run as 5.0.2 runs it), a PARSER_REGISTRY name, an EvalType value
    eval_script: str | None = None
    log_parser: str | None = None
    eval_type: EvalType | None = None


def _where(source: str, index: int, row: Mapping[str, Any]) -> str:
    instance_id = row.get("instance_id")
    name = instance_id if isinstance(instance_id, str) and instance_id else "instance_id missing"
    return f"{source} row {index} ({name})"


def _text(row: Mapping[str, Any], key: str, where: str, *, required: bool) -> str | None:
    value = row.get(key)
    if value is None:
        if required:
            raise ConfigError(f"{where}: {key}: missing")
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key}: expected a string, got {type(value).__name__}")
    return value


def _test_list(row: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = row.get(key)
    if value is None:
        raise ConfigError(f"{where}: {key}: missing")
    if isinstance(value, str):
        # SWE-bench and SWE-Gym store these as JSON-encoded strings
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{where}: {key}: not a JSON list of test ids: {exc}") from exc
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
        raise ConfigError(f"{where}: {key}: expected a list of test ids (strings)")
    return tuple(value)


def _log_parser(row: Mapping[str, Any], where: str) -> str | None:
    name = _text(row, "log_parser", where, required=False)
    if name and not known_parser(name):
        raise ConfigError(f"{where}: log_parser: {name!r} is not a parser name (swebench's PARSER_REGISTRY or ours)")
    return name or None


def _eval_type(row: Mapping[str, Any], where: str) -> EvalType | None:
    value = _text(row, "eval_type", where, required=False)
    if not value:
        return None
    for eval_type in EVAL_TYPES:
        if value == eval_type:
            return eval_type
    raise ConfigError(f"{where}: eval_type: {value!r}: expected one of {', '.join(EVAL_TYPES)}")


def _build_spec(row: Mapping[str, Any], where: str, base_dir: Path | None) -> BuildSpec | None:
    value = row.get("build")
    if value is None:
        return None
    if base_dir is None:
        raise ConfigError(f"{where}: build: only manifests read from a file may carry a build spec")
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: build: expected an object with context, dockerfile, args")
    unknown = set(value) - {"context", "dockerfile", "args"}
    if unknown:
        raise ConfigError(f"{where}: build: unknown keys {sorted(unknown)}")
    context, dockerfile, args = value.get("context", "."), value.get("dockerfile", "Dockerfile"), value.get("args", {})
    if not isinstance(context, str) or not isinstance(dockerfile, str):
        raise ConfigError(f"{where}: build.context and build.dockerfile: expected strings")
    if not isinstance(args, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in args.items()):
        raise ConfigError(f"{where}: build.args: expected an object of strings")
    return BuildSpec((base_dir / context).resolve(), dockerfile, dict(args))


def parse_row(row: Any, index: int, source: str = "manifest", base_dir: Path | None = None) -> Instance:
    """One manifest row as an `Instance`; raises `ConfigError` naming the row and field."""
    if not isinstance(row, Mapping):
        raise ConfigError(f"{source} row {index}: expected an object, got {type(row).__name__}")
    where = _where(source, index, row)
    instance_id = _text(row, "instance_id", where, required=True)
    text = {key: _text(row, key, where, required=True) for key in _REQUIRED_TEXT}
    optional = {key: _text(row, key, where, required=False) for key in _OPTIONAL_TEXT}
    assert instance_id is not None  # required=True never returns None
    if not instance_id.strip():
        raise ConfigError(f"{where}: instance_id: empty")
    return Instance(
        instance_id=instance_id,
        repo=text["repo"] or "",
        base_commit=text["base_commit"] or "",
        problem_statement=text["problem_statement"] or "",
        patch=text["patch"] or "",
        test_patch=text["test_patch"] or "",
        fail_to_pass=_test_list(row, "FAIL_TO_PASS", where),
        pass_to_pass=_test_list(row, "PASS_TO_PASS", where),
        version=optional["version"] or "",
        environment_setup_commit=optional["environment_setup_commit"] or "",
        image=optional["image"] or None,
        test_cmd=optional["test_cmd"] or None,
        build=_build_spec(row, where, base_dir),
        eval_script=_text(row, "eval_script", where, required=False) or None,
        log_parser=_log_parser(row, where),
        eval_type=_eval_type(row, where),
    )


def _read_rows(path: Path) -> list[Any]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = []
        for number, line in enumerate(path.read_bytes().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise ConfigError(f"{path} line {number}: not valid JSON: {exc}") from exc
        return rows
    if suffix == ".json":
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
        if not isinstance(data, list):
            raise ConfigError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
        return data
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return list(pq.read_table(path).to_pylist())
        except Exception as exc:  # pyarrow raises several unrelated types for a bad file
            raise ConfigError(f"{path}: unreadable Parquet file: {exc}") from exc
    raise ConfigError(f"{path}: unknown manifest format {suffix!r} (expected .json, .jsonl or .parquet)")


def _read_dataset(name: str) -> list[Any]:
    dataset, _, split = name.partition(":")
    try:
        import datasets

        loaded = datasets.load_dataset(dataset, split=split or "train")
    except Exception as exc:  # network, auth and unknown-name errors all land here
        raise ConfigError(f"manifest {name}: not a file, and loading it as a datasets name failed: {exc}") from exc
    return [dict(row) for row in loaded]


def _looks_like_dataset(name: str) -> bool:
    dataset = name.partition(":")[0]
    return dataset.count("/") == 1 and not dataset.startswith((".", "/")) and Path(dataset).suffix == ""


def load_manifest(source: str | Path) -> list[Instance]:
    """Every row of the manifest at ``source`` (a file path or a datasets name), in manifest order."""
    path = Path(source)
    if path.exists():
        rows, base_dir, label = _read_rows(path), path.resolve().parent, str(path)
    elif isinstance(source, str) and _looks_like_dataset(source):
        rows, base_dir, label = _read_dataset(source), None, source
    else:
        raise ConfigError(f"manifest {source}: no such file")
    instances = [parse_row(row, index, label, base_dir) for index, row in enumerate(rows)]
    seen: dict[str, int] = {}
    for index, instance in enumerate(instances):
        first = seen.setdefault(instance.instance_id, index)
        if first != index:
            raise ConfigError(f"{label} row {index} ({instance.instance_id}): instance_id: duplicate of row {first}")
    return instances


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/N"`` (0 <= i < N) as ``(i, N)``."""
    index, sep, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise ConfigError(f"--shard {text}: expected i/N, e.g. 0/4") from None
    if not sep or n < 1 or not 0 <= i < n:
        raise ConfigError(f"--shard {text}: expected i/N with 0 <= i < N")
    return i, n


def select(
    instances: Sequence[Instance],
    *,
    instance_ids: Iterable[str] | None = None,
    repos: Iterable[str] | None = None,
    limit: int | None = None,
    shard: tuple[int, int] | None = None,
) -> list[Instance]:
    """Filter by ids and repos, keep the first ``limit``, then take shard i of N (every N-th from i).

    Limiting before sharding makes the N shards of one command line cover exactly the limited set. Asking for an
    id that is not in the manifest, or a repo with no instance, is a `ConfigError`.
    """
    chosen = list(instances)
    if instance_ids is not None:
        chosen = _keep(chosen, instance_ids, lambda i: i.instance_id, "--instance-ids: not in the manifest:")
    if repos is not None:
        chosen = _keep(chosen, repos, lambda i: i.repo, "--repos: no selected instance of")
    if limit is not None:
        if limit < 0:
            raise ConfigError(f"--limit {limit}: must not be negative")
        chosen = chosen[:limit]
    if shard is not None:
        index, count = shard
        chosen = chosen[index::count]
    return chosen


def _keep(
    instances: list[Instance], wanted: Iterable[str], key: Callable[[Instance], str], missing: str
) -> list[Instance]:
    """The instances whose ``key`` is one of ``wanted``; a wanted value that none has is a `ConfigError` naming
    every such value after ``missing``, so a typo never selects silently less than asked for."""
    values = list(dict.fromkeys(wanted))
    present = {key(i) for i in instances}
    absent = [v for v in values if v not in present]
    if absent:
        raise ConfigError(f"{missing} {', '.join(absent)}")
    keep = set(values)
    return [i for i in instances if key(i) in keep]

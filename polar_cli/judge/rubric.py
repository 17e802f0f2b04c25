"""Rubric files: the criteria a judge scores a session on (docs/judge.md "Rubric").

A rubric is YAML::

    name: code-quality            # optional
    scale: 10                     # optional: scores are integers 0..scale (default 10)
    criteria:
      - name: correctness         # [a-z0-9_-], unique
        description: The change fixes the issue the task describes, and nothing else.
        weight: 2                 # > 0 (default 1)

The rubric's ``sha256`` is of the file's bytes, so a row names exactly the rubric it was scored against.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from polar_cli.errors import ConfigError

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Criterion:
    name: str
    description: str
    weight: float

    @classmethod
    def parse(cls, item: Any, where: str) -> Criterion:
        """One entry of ``criteria``; ConfigError naming ``where`` and what is wrong."""
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: expected a mapping with name, description, weight")
        unknown = set(item) - {"name", "description", "weight"}
        if unknown:
            raise ConfigError(f"{where}: unknown keys {sorted(unknown)} (name, description, weight)")
        name, description, weight = item.get("name"), item.get("description"), item.get("weight", 1)
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{where}: name must match {_NAME.pattern}, got {name!r}")
        if not isinstance(description, str) or not description.strip():
            raise ConfigError(f"{where} ({name}): description must be non-empty text")
        if not isinstance(weight, int | float) or isinstance(weight, bool) or not 0 < weight < float("inf"):
            raise ConfigError(f"{where} ({name}): weight must be a number above 0, got {weight!r}")
        return cls(name, description.strip(), float(weight))


@dataclass(frozen=True, slots=True)
class Rubric:
    criteria: tuple[Criterion, ...]
    scale: int
    sha256: str
    name: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.criteria)


def parse_rubric(data: bytes, source: str = "rubric") -> Rubric:
    """A rubric from a file's bytes; ConfigError naming what is wrong."""
    try:
        raw = yaml.safe_load(data.decode())
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping with 'criteria'")
    unknown = set(raw) - {"name", "scale", "criteria"}
    if unknown:
        raise ConfigError(f"{source}: unknown keys {sorted(unknown)} (name, scale, criteria)")
    scale = raw.get("scale", 10)
    if not isinstance(scale, int) or isinstance(scale, bool) or not 1 <= scale <= 100:
        raise ConfigError(f"{source}: scale must be an integer 1..100, got {scale!r}")
    items = raw.get("criteria")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{source}: criteria must be a non-empty list")
    criteria = tuple(Criterion.parse(item, f"{source}: criteria[{i}]") for i, item in enumerate(items))
    names = [c.name for c in criteria]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: a criterion name is used twice: {names}")
    return Rubric(criteria, scale, hashlib.sha256(data).hexdigest(), str(raw.get("name") or ""))


def load_rubric(path: str | Path) -> Rubric:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"rubric {path}: {exc.strerror or exc}") from exc
    return parse_rubric(data, f"rubric {path}")

"""Dotted-key overrides (``a.b=value``) of a raw config dict, checked against its pydantic model, and a validation
error as one line: shared by recipes (`config`), `polar serve`'s config (`serve.config`) and harness config files.

The value is read as YAML, except for text keys (instruction, paths, names), which take it verbatim; a key the model
does not have is refused with the keys it does have.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from polar_cli.errors import ConfigError


def errors_text(exc: ValidationError) -> str:
    """A validation error as one line: each failing key's dotted path and what is wrong with it."""
    lines = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "(recipe)"
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{where}: {message}")
    return "; ".join(lines)


def _field_model(model: type[BaseModel], key: str) -> type[BaseModel] | Literal["open"] | None:
    """The model a dotted path continues into below ``key``: a model, "open" (a free dict) or None (a leaf)."""
    annotation = model.model_fields[key].annotation
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
        if candidate is dict or get_origin(candidate) is dict:
            return "open"
    return None


def _leaf_annotation(path: Sequence[str], text: str, root: type[BaseModel]) -> Any:
    """Check that ``path`` names a key of ``root``; returns the leaf's type annotation (None inside a free dict)."""
    model: type[BaseModel] | Literal["open"] | None = root
    annotation: Any = None
    for depth, key in enumerate(path):
        if model == "open":
            return None
        if model is None:
            raise ConfigError(f"override {text}: {'.'.join(path[:depth])} takes a value, not sub-keys")
        if key not in model.model_fields:
            known = ", ".join(model.model_fields)
            where = ".".join(path[: depth + 1])
            raise ConfigError(f"override {text}: unknown key {where} (known here: {known})")
        annotation = model.model_fields[key].annotation
        model = _field_model(model, key)
    return annotation


def _is_text(annotation: Any) -> bool:
    """``str`` or ``str | None``."""
    if annotation is str:
        return True
    return get_origin(annotation) in (Union, UnionType) and set(get_args(annotation)) == {str, type(None)}


def apply_override(data: dict[str, Any], text: str, root: type[BaseModel]) -> None:
    """Set ``dotted.key=value`` in a raw config dict of the model ``root``; ConfigError for a bad override.

    The value is read as YAML, except for text keys (instruction, paths, names), which take it verbatim: YAML would
    read ``Fix: {problem_statement}`` as a mapping. ``null`` still clears an optional text key.
    """
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or not all(path):
        raise ConfigError(f"override {text!r}: expected dotted.key=value, e.g. concurrency.run=8")
    annotation = _leaf_annotation(path, text, root)
    if _is_text(annotation) and raw.strip() not in ("null", "~", ""):
        value: Any = raw
    else:
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {text}: the value is not valid YAML: {exc}") from exc
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"override {text}: {part} is not a mapping in the recipe")
        node = child
    node[path[-1]] = value


def plain(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: plain(v) if isinstance(v, Mapping) else v for k, v in data.items()}

"""JSON type checks for decoding Chat Completions bodies: a wrong type becomes a `RequestError` naming the field.

A body is untrusted JSON, so the decoder reads every field through these rather than trusting its type; ``path`` is
the field's location in the body (``messages[3].content``), and ``""`` means the top level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polar_cli.errors import RequestError


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def type_error(path: str, expected: str, value: Any) -> RequestError:
    return RequestError(f"{path}: expected {expected}, got {json_type(value)}")


def at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def obj(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise type_error(path, "an object", value)
    return value


def req_obj(parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if value is None:
        raise RequestError(f"{at(path, key)}: required")
    return obj(value, at(path, key))


def opt_obj(parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
    value = parent.get(key)
    return None if value is None else obj(value, at(path, key))


def opt_list(parent: Mapping[str, Any], key: str, path: str) -> list[Any]:
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise type_error(at(path, key), "an array", value)
    return value


def req_str(parent: Mapping[str, Any], key: str, path: str) -> str:
    value = parent.get(key)
    if value is None:
        raise RequestError(f"{at(path, key)}: required")
    if not isinstance(value, str):
        raise type_error(at(path, key), "a string", value)
    return value


def opt_str(parent: Mapping[str, Any], key: str, path: str) -> str | None:
    value = parent.get(key)
    if value is not None and not isinstance(value, str):
        raise type_error(at(path, key), "a string", value)
    return value


def opt_bool(parent: Mapping[str, Any], key: str, path: str) -> bool | None:
    value = parent.get(key)
    if value is not None and not isinstance(value, bool):
        raise type_error(at(path, key), "a boolean", value)
    return value


def opt_int(parent: Mapping[str, Any], key: str, path: str) -> int | None:
    value = parent.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise type_error(at(path, key), "an integer", value)
    return value


def opt_float(parent: Mapping[str, Any], key: str) -> float | None:
    value = parent.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise type_error(key, "a number", value)
    try:
        return float(value)
    except OverflowError as exc:  # an integer too large for a float
        raise RequestError(f"{key}: number out of range") from exc

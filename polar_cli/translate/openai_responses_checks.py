"""JSON type checks for decoding Responses bodies: a wrong type becomes a `RequestError` naming the field.

A body is untrusted JSON, so the decoder reads every field through these instead of trusting its type; ``path`` is
the field's location in the body (``input[3].content[0].text``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polar_cli.errors import RequestError


def obj(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RequestError(f"{path}: expected an object, got {json_type(value)}")
    return value


def array(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise RequestError(f"{path}: expected an array, got {json_type(value)}")
    return value


def string(value: Any, path: str) -> str:
    if value is None:
        raise RequestError(f"{path}: required")
    if not isinstance(value, str):
        raise RequestError(f"{path}: expected a string, got {json_type(value)}")
    return value


def opt_string(value: Any, path: str) -> str | None:
    return None if value is None else string(value, path)


def opt_bool(value: Any, path: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise RequestError(f"{path}: expected a boolean, got {json_type(value)}")


def opt_int(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{path}: expected an integer, got {json_type(value)}")
    return value


def opt_float(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"{path}: expected a number, got {json_type(value)}")
    try:
        return float(value)
    except OverflowError as exc:  # an integer beyond float range (Python's json parses those)
        raise RequestError(f"{path}: number out of range") from exc


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"

"""JSON type checks for decoding request bodies: every wrong type becomes a `RequestError` naming the field path.

A body is untrusted JSON, so a decoder reads each field through one of these instead of trusting its type: the
error then says ``messages[3].content: expected an array, got string`` rather than raising a TypeError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from polar_cli.errors import RequestError


def fail(path: str, problem: str) -> NoReturn:
    raise RequestError(f"{path}: {problem}")


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
    return "object" if isinstance(value, Mapping) else type(value).__name__


def show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else json_type(value)


def expected(path: str, what: str, value: Any) -> NoReturn:
    fail(path, "required" if value is None else f"expected {what}, got {json_type(value)}")


def obj(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        expected(path, "an object", value)
    return value


def array(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        expected(path, "an array", value)
    return value


def string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        expected(path, "a string", value)
    return value


def opt_obj(value: Any, path: str) -> Mapping[str, Any] | None:
    return None if value is None else obj(value, path)


def opt_str(value: Any, path: str) -> str | None:
    return None if value is None else string(value, path)


def opt_bool(value: Any, path: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    expected(path, "a boolean", value)


def opt_int(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        expected(path, "an integer", value)
    return value


def opt_float(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        expected(path, "a number", value)
    return float(value)

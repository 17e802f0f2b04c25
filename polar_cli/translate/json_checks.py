"""Typed reads of untrusted JSON for the request decoders: a wrong type becomes a `RequestError` naming the field.

A request body is untrusted JSON, so every decoder reads each field through one of these instead of trusting its
type; the error then says ``messages[3].content: expected an array, got string`` rather than raising a TypeError deep
inside a codec. ``path`` is the field's location in the body, and `at` joins a key onto it (``""`` is the top level).
A required field that is absent or null is reported as ``<path>: required``. `load_object` parses a JSON object
from bytes or text for anyone who reads one (a request body, an upstream answer, a flag's value), with the error class
of whoever is at fault.

Bodies are parsed by orjson, so objects are always ``dict`` and arrays ``list``: the checks test those concrete types,
because an ABC check such as ``isinstance(x, Mapping)`` costs about five times as much and these run on every field of
every request the gateway proxies.
"""

from __future__ import annotations

from typing import Any, NoReturn

import orjson

from polar_cli.errors import PolarError, RequestError


def fail(path: str, problem: str) -> NoReturn:
    raise RequestError(f"{path}: {problem}")


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for error messages."""
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
    return "object" if isinstance(value, dict) else type(value).__name__


def expected(path: str, what: str, value: Any) -> NoReturn:
    """Fail for ``value`` found where ``what`` (``"an array"``) belongs: ``required`` when it is absent."""
    fail(path, "required" if value is None else f"expected {what}, got {json_type(value)}")


def at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def load_object(raw: bytes | str, what: str, error: type[PolarError] = RequestError) -> dict[str, Any]:
    """``raw`` parsed as a JSON object, else ``error`` naming ``what``: the class says whose fault a bad one is (the
    caller's request body, the upstream's answer, a command-line flag)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise error(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


def request_body(value: Any) -> dict[str, Any]:
    """The request body itself, which must be a JSON object."""
    if not isinstance(value, dict):
        fail("body", f"expected a JSON object, got {json_type(value)}")
    return value


def obj(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
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


def opt_obj(value: Any, path: str) -> dict[str, Any] | None:
    return None if value is None else obj(value, path)


def opt_array(value: Any, path: str) -> list[Any] | None:
    return None if value is None else array(value, path)


def opt_str(value: Any, path: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    expected(path, "a string", value)


def opt_bool(value: Any, path: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    expected(path, "a boolean", value)


def opt_int(value: Any, path: str) -> int | None:
    # bool is an int subclass, and JSON true is not a number.
    if value is None or type(value) is int:
        return value
    expected(path, "an integer", value)


def opt_float(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, float):
        return value
    if type(value) is not int:
        expected(path, "a number", value)
    try:
        return float(value)
    except OverflowError as exc:  # an integer beyond float range
        raise RequestError(f"{path}: number out of range") from exc


def json_text(value: Any, path: str) -> str:
    """``value`` as compact JSON text; what JSON cannot carry (a lone surrogate, a non-string key) fails at ``path``."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError as exc:
        fail(path, f"not encodable as JSON ({exc})")

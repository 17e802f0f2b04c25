"""Reading Google's proto3 JSON: fields under either spelling, typed getters that name the path, schema conversion.

Google's JSON mapping of protobuf accepts every field under its camelCase name *or* its original snake_case name, and
clients use both: Gemini CLI sends ``parametersJsonSchema``, the google-genai Python SDK ``parameters_json_schema``
(and ``mime_type``, ``include_thoughts``, ``min_length`` ...). Every lookup in the Google codec goes through `field`,
so no call site has to remember the second spelling. Error paths always use the camelCase name.

Function parameters and response schemas arrive in two dialects: ``parameters``/``responseSchema`` are Google's
OpenAPI-subset ``Schema`` message (``"type": "OBJECT"``, ``nullable``, ``propertyOrdering``), while
``parametersJsonSchema``/``responseJsonSchema`` are plain JSON Schema. The upstream wants JSON Schema, so the first is
converted by `openapi_to_json_schema`; the second passes through `lowercase_schema_types`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from polar_cli.translate import json_checks as check
from polar_cli.translate.json_checks import at, fail

# Deeper schemas than this are refused rather than risking Python's recursion limit on hostile input.
MAX_SCHEMA_DEPTH = 64

_OPENAPI_TYPES = frozenset({"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"})
# JSON Schema keywords whose value is one schema, a list of schemas, or a name -> schema map.
_ONE_SCHEMA = frozenset({"items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames"})
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


@lru_cache(maxsize=256)
def snake(name: str) -> str:
    return re.sub(r"([A-Z])", r"_\1", name).lower()


@lru_cache(maxsize=256)
def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def field(obj: Mapping[str, Any], name: str) -> Any:
    """The value of the proto3 field ``name`` (camelCase) under either spelling; None when absent or null."""
    value = obj.get(name)
    if value is None:
        value = obj.get(snake(name))
    return value


# The getters join the error path only when a check fails: they run on every part of every request.


def opt_obj(parent: Mapping[str, Any], name: str, path: str) -> dict[str, Any] | None:
    value = field(parent, name)
    return value if value is None or isinstance(value, dict) else check.obj(value, at(path, name))


def opt_list(parent: Mapping[str, Any], name: str, path: str) -> list[Any] | None:
    value = field(parent, name)
    return value if value is None or isinstance(value, list) else check.array(value, at(path, name))


def opt_str(parent: Mapping[str, Any], name: str, path: str) -> str | None:
    value = field(parent, name)
    return value if value is None or isinstance(value, str) else check.string(value, at(path, name))


def req_str(parent: Mapping[str, Any], name: str, path: str) -> str:
    value = field(parent, name)
    return value if isinstance(value, str) else check.string(value, at(path, name))


def opt_bool(parent: Mapping[str, Any], name: str, path: str) -> bool | None:
    value = field(parent, name)
    return value if value is None or isinstance(value, bool) else check.opt_bool(value, at(path, name))


def opt_float(parent: Mapping[str, Any], name: str, path: str) -> float | None:
    return check.opt_float(field(parent, name), at(path, name))


_INT64 = 2.0**63


def opt_int(parent: Mapping[str, Any], name: str, path: str) -> int | None:
    """An integer field; integral floats are accepted because the Python SDK sends ``topK`` as ``3.0`` (within the
    64-bit range every server takes: ``1e300`` is refused, not passed on as a 301-digit integer)."""
    value = field(parent, name)
    if isinstance(value, float) and value.is_integer() and abs(value) < _INT64:
        return int(value)
    return check.opt_int(value, at(path, name))


def str_list(parent: Mapping[str, Any], name: str, path: str) -> list[str]:
    items = opt_list(parent, name, path) or []
    for i, item in enumerate(items):
        check.string(item, f"{at(path, name)}[{i}]")
    return items


# --- schemas --------------------------------------------------------------------------------------------------------


def openapi_to_json_schema(value: Any, path: str, depth: int = 0) -> dict[str, Any]:
    """Convert Google's OpenAPI-subset ``Schema`` (either spelling, uppercase types) into JSON Schema.

    ``nullable: true`` becomes a ``"null"`` member of ``type``, ``example`` becomes ``examples``, and
    ``propertyOrdering`` (a Gemini output-ordering hint with no JSON Schema meaning) is dropped.
    """
    schema = check.obj(value, path)
    if depth > MAX_SCHEMA_DEPTH:
        fail(path, f"schema nested deeper than {MAX_SCHEMA_DEPTH} levels")
    out: dict[str, Any] = {}
    nullable = False
    for raw_key, item in schema.items():
        key = camel(raw_key)
        if item is None or key == "propertyOrdering":
            continue
        if key == "type":
            check.string(item, at(path, key))
            if item.upper() in _OPENAPI_TYPES:
                out["type"] = item.lower()
            elif item.upper() != "TYPE_UNSPECIFIED":
                fail(at(path, key), f"unknown schema type {item!r}")
        elif key == "nullable":
            nullable = item is True
        elif key == "properties":
            props = check.obj(item, at(path, key))
            out[key] = {n: openapi_to_json_schema(s, f"{at(path, key)}.{n}", depth + 1) for n, s in props.items()}
        elif key == "items":
            out[key] = openapi_to_json_schema(item, at(path, key), depth + 1)
        elif key == "anyOf":
            subs = check.array(item, at(path, key))
            out[key] = [openapi_to_json_schema(s, f"{at(path, key)}[{i}]", depth + 1) for i, s in enumerate(subs)]
        elif key == "example":
            out["examples"] = [item]
        else:
            out[key] = item
    if nullable and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def lowercase_schema_types(value: Any, path: str, depth: int = 0) -> dict[str, Any]:
    """A JSON Schema with any OpenAPI-style uppercase ``type`` names (``"OBJECT"``) lowered, everything else kept.

    Only schema positions are walked (``properties`` values, ``items``, ``anyOf`` members ...), so a property that
    happens to be *named* ``type`` is left alone.
    """
    schema = check.obj(value, path)
    if depth > MAX_SCHEMA_DEPTH:
        fail(path, f"schema nested deeper than {MAX_SCHEMA_DEPTH} levels")
    out = dict(schema)
    # One pass over the keys the schema has, not over every keyword it might have: this runs on every tool's
    # parameters in every request.
    for key, item in schema.items():
        if key == "type":
            if isinstance(item, str):
                if item in _OPENAPI_TYPES:
                    out[key] = item.lower()
            elif isinstance(item, list):
                out[key] = [k.lower() if isinstance(k, str) and k in _OPENAPI_TYPES else k for k in item]
        elif key in _SCHEMA_MAPS:
            if isinstance(item, dict):
                out[key] = {
                    n: lowercase_schema_types(s, f"{at(path, key)}.{n}", depth + 1) if isinstance(s, dict) else s
                    for n, s in item.items()
                }
        elif key in _ONE_SCHEMA:
            if isinstance(item, dict):
                out[key] = lowercase_schema_types(item, at(path, key), depth + 1)
        elif key in _SCHEMA_LISTS and isinstance(item, list):
            out[key] = [
                lowercase_schema_types(s, f"{at(path, key)}[{i}]", depth + 1) if isinstance(s, dict) else s
                for i, s in enumerate(item)
            ]
    return out

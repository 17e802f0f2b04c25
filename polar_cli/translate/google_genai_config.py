"""Decoding Gemini's ``tools``, ``toolConfig`` and ``generationConfig`` into the IR's tools, tool choice, sampling,
reasoning and response format. Part of the Google codec (`google_genai`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polar_cli.translate.google_genai_fields import (
    camel,
    field,
    lowercase_schema_types,
    openapi_to_json_schema,
    opt_bool,
    opt_float,
    opt_int,
    opt_obj,
    opt_str,
    req_str,
    str_list,
)
from polar_cli.translate.ir import Reasoning, ResponseFormat, Sampling, Tool, ToolChoice
from polar_cli.translate.json_checks import array, at, fail, obj

# Tools that run on Google's servers (see `quirk_drop_builtin_tool`).
_BUILTIN_TOOLS = {
    "googleSearch",
    "googleSearchRetrieval",
    "codeExecution",
    "urlContext",
    "retrieval",
    "computerUse",
    "fileSearch",
    "googleMaps",
    "enterpriseWebSearch",
}
_THINKING_LEVELS = {"MINIMAL": "minimal", "LOW": "low", "MEDIUM": "medium", "HIGH": "high"}
_EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
_CONFIG = "generationConfig"


# --- tools ----------------------------------------------------------------------------------------------------------


def quirk_drop_builtin_tool(key: str) -> bool:
    """Google-hosted tools (search, code execution, URL context ...) run on Google's servers: a local model cannot
    run them, so they are not offered rather than failing the request."""
    return key in _BUILTIN_TOOLS


def decode_tools(raw: Any) -> tuple[Tool, ...]:
    """``tools``: every ``functionDeclarations`` entry becomes a tool; Google-hosted tools are dropped."""
    if raw is None:
        return ()
    tools: list[Tool] = []
    for ti, item in enumerate(array(raw, "tools")):
        path = f"tools[{ti}]"
        for raw_key, value in obj(item, path).items():
            key = camel(raw_key)
            if value is None or quirk_drop_builtin_tool(key):
                continue
            if key != "functionDeclarations":
                fail(at(path, key), f"unsupported tool type {key!r}")  # the policy of every API (translate/README.md)
            declarations = array(value, at(path, key))
            tools.extend(_declaration(d, f"{at(path, key)}[{i}]") for i, d in enumerate(declarations))
    return tuple(tools)


def _declaration(raw: Any, path: str) -> Tool:
    decl = obj(raw, path)
    json_schema = field(decl, "parametersJsonSchema")
    openapi = field(decl, "parameters")
    if json_schema is not None and openapi is not None:
        fail(path, "parameters and parametersJsonSchema are mutually exclusive")
    if json_schema is not None:
        parameters = quirk_uppercase_schema_types(json_schema, at(path, "parametersJsonSchema"))
    elif openapi is not None:
        parameters = openapi_to_json_schema(openapi, at(path, "parameters"))
    else:
        parameters = dict(_EMPTY_PARAMETERS)
    return Tool(
        name=req_str(decl, "name", path), description=opt_str(decl, "description", path) or "", parameters=parameters
    )


def quirk_uppercase_schema_types(schema: Any, path: str) -> dict[str, Any]:
    """Gemini CLI's router sends ``responseJsonSchema`` with OpenAPI's uppercase types (``"OBJECT"``), which Gemini
    tolerates but JSON Schema validators upstream reject: lower them in every JSON Schema we pass on."""
    return lowercase_schema_types(schema, path)


def decode_tool_choice(tool_config: Mapping[str, Any] | None) -> ToolChoice | None:
    """``toolConfig.functionCallingConfig``: AUTO/VALIDATED -> auto, NONE -> none, ANY -> required (or the one tool)."""
    if tool_config is None:
        return None
    path = "toolConfig.functionCallingConfig"
    calling = opt_obj(tool_config, "functionCallingConfig", "toolConfig")
    if calling is None:
        return None
    mode = (opt_str(calling, "mode", path) or "MODE_UNSPECIFIED").upper()
    allowed = str_list(calling, "allowedFunctionNames", path)
    if mode == "MODE_UNSPECIFIED":
        return None
    # VALIDATED lets the model answer in text or call a function, its calls schema-checked: OpenAI's "auto".
    if mode in ("AUTO", "VALIDATED"):
        return ToolChoice(mode="auto")
    if mode == "NONE":
        return ToolChoice(mode="none")
    if mode == "ANY":
        # Several allowed names cannot be said in OpenAI's tool_choice: all tools stay offered, one call is required.
        return ToolChoice(mode="tool", name=allowed[0]) if len(allowed) == 1 else ToolChoice(mode="required")
    fail(at(path, "mode"), f"unknown mode {mode!r} (expected AUTO, ANY, NONE or VALIDATED)")


# --- generation config ----------------------------------------------------------------------------------------------


def decode_sampling(config: Mapping[str, Any]) -> Sampling:
    """``generationConfig`` sampling fields; more than one candidate or a non-text modality is refused."""
    candidates = opt_int(config, "candidateCount", _CONFIG)
    if candidates is not None and candidates > 1:
        fail(at(_CONFIG, "candidateCount"), f"only one candidate is supported, got {candidates}")
    for i, modality in enumerate(str_list(config, "responseModalities", _CONFIG)):
        if modality.upper() != "TEXT":
            fail(f"{_CONFIG}.responseModalities[{i}]", f"unsupported modality {modality!r} (only TEXT)")
    return Sampling(
        max_tokens=opt_int(config, "maxOutputTokens", _CONFIG),
        temperature=opt_float(config, "temperature", _CONFIG),
        top_p=opt_float(config, "topP", _CONFIG),
        top_k=opt_int(config, "topK", _CONFIG),
        presence_penalty=opt_float(config, "presencePenalty", _CONFIG),
        frequency_penalty=opt_float(config, "frequencyPenalty", _CONFIG),
        seed=opt_int(config, "seed", _CONFIG),
        stop=tuple(str_list(config, "stopSequences", _CONFIG)),
    )


def decode_reasoning(config: Mapping[str, Any]) -> Reasoning | None:
    """``generationConfig.thinkingConfig``: a budget of 0 turns thinking off, a level becomes the effort."""
    path = at(_CONFIG, "thinkingConfig")
    thinking = opt_obj(config, "thinkingConfig", _CONFIG)
    if thinking is None:
        return None
    include = opt_bool(thinking, "includeThoughts", path)
    budget = opt_int(thinking, "thinkingBudget", path)
    level = opt_str(thinking, "thinkingLevel", path)
    effort = None
    if level is not None and level.upper() != "THINKING_LEVEL_UNSPECIFIED":
        effort = _THINKING_LEVELS.get(level.upper())
        if effort is None:
            fail(at(path, "thinkingLevel"), f"unknown level {level!r} (expected MINIMAL, LOW, MEDIUM or HIGH)")
    if budget == 0:
        return Reasoning(enabled=False)
    if budget is None and effort is None and not include:
        return None
    # A budget of -1 asks for dynamic thinking: on, with no fixed budget.
    return Reasoning(enabled=True, effort=effort, budget_tokens=budget if budget and budget > 0 else None)


def decode_response_format(config: Mapping[str, Any]) -> ResponseFormat | None:
    """JSON mode: a schema (either dialect) -> ``json_schema``; ``application/json`` alone -> ``json_object``."""
    mime = opt_str(config, "responseMimeType", _CONFIG)
    json_schema = field(config, "responseJsonSchema")
    openapi = field(config, "responseSchema")
    schema = None
    if json_schema is not None:
        schema = quirk_uppercase_schema_types(json_schema, at(_CONFIG, "responseJsonSchema"))
    elif openapi is not None:
        schema = openapi_to_json_schema(openapi, at(_CONFIG, "responseSchema"))
    if mime not in (None, "text/plain", "application/json"):
        fail(at(_CONFIG, "responseMimeType"), f"unsupported {mime!r} (expected text/plain or application/json)")
    if schema is not None:
        return ResponseFormat(type="json_schema", schema=schema)
    # JSON mode without a schema: Gemini CLI's router depends on getting bare JSON back.
    return ResponseFormat(type="json_object") if mime == "application/json" else None

"""OpenAI Responses ``tools`` and ``tool_choice`` -> the IR: functions, freeform tools, namespace groups, hosted tools.

Policy for a tool's ``type`` (the same in every API module, see translate/README.md "Tool types"):

- ``function`` and ``custom`` become IR tools.
- ``namespace`` groups are flattened: each inner tool becomes an IR tool with a flat, unique name, and remembers its
  ``(namespace, name)`` pair (`ir.Namespaced`) so the model's call goes back to the harness in the shape it parses.
- Hosted tools (OpenAI runs them, or only its own models emit their call items: ``tool_search``, ``web_search``...)
  are hidden from the model: dropped, since a local model could not have them run.
- Any other type is refused with a 400 naming ``tools[i].type`` and the type: a tool the model silently never sees
  would change what the harness believes it offered, so an unknown kind is never guessed at or dropped.

Namespaces, as Codex sends and reads them (codex-rs 0.171):

- Codex declares ``{"type": "namespace", "name": "multi_agent_v1", "description", "tools": [function tools]}``
  (openai/codex ``codex-rs/tools/src/responses_api.rs``: ``ResponsesApiNamespace``, ``ResponsesApiNamespaceTool``);
  MCP servers' tools come the same way, one namespace per server (``mcp__<server>``). It sends one for its
  multi-agent tools when it has no metadata for the model name, and ``tool_search`` instead for models it knows.
- It reads the model's call as ``function_call`` (or ``custom_tool_call``) with ``name`` = the inner tool's name and
  a separate ``namespace`` field (``codex-rs/core/src/tools/router.rs``: ``ToolName::new(namespace, name)``); the
  official SDK models the same field (``ResponseFunctionToolCall.namespace``, ``NamespaceTool``). A flat
  ``mcp__server__tool`` name with no ``namespace`` is an "unsupported call" for Codex.
- Where a boundary cannot keep the split, Codex's own flat spelling is ``<namespace>__<name>`` with stray underscores
  around the joint trimmed (``codex-rs/protocol/src/tool_name.rs``: ``canonical_flat_name``), which is also the
  ``mcp__server__tool`` shape models are trained on; the upstream is offered that name.
- envoyproxy/ai-gateway PR 2317 added ``namespace`` and ``tool_search`` to its Responses schema for Codex >= 0.120
  (a pass-through to OpenAI, which runs both); vllm-project/agentic-api PR 84 flattens and restores as done here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polar_cli.errors import RequestError
from polar_cli.translate import ir
from polar_cli.translate import json_checks as check

# Built-in tool types: OpenAI runs them on its servers or only its own models emit their call items. The gateway's
# model is offered functions, and the encoder answers with function and custom tool calls only.
HOSTED_TOOL_TYPES = frozenset(
    {"web_search", "web_search_preview", "tool_search", "file_search", "computer_use", "computer_use_preview"}
    | {"mcp", "local_shell", "shell", "apply_patch", "image_generation", "code_interpreter", "computer"}
)
# Dated variants (``web_search_preview_2025_03_11``) share the family name as a prefix.
_HOSTED_DATED_PREFIXES = tuple(f"{h}_20" for h in sorted(HOSTED_TOOL_TYPES))
_EMPTY_SCHEMA: ir.JsonObject = {"type": "object", "properties": {}}
_JOINT = "__"
_PLAIN = ("function", "custom")
# (namespace, inner name) -> the flat name the upstream was offered
FlatNames = Mapping[tuple[str, str], str]


def drop_hosted_tools(tools: list[Any]) -> list[tuple[int, Any]]:
    """Quirk: Codex offers OpenAI-hosted tools (``web_search``, ``tool_search``) the gateway cannot run; hide them.

    Returns the remaining tools with their original index, so error messages still name the right ``tools[i]``.
    """
    return [(i, t) for i, t in enumerate(tools) if not (isinstance(t, dict) and _is_hosted(t.get("type")))]


def _is_hosted(kind: Any) -> bool:
    return isinstance(kind, str) and (kind in HOSTED_TOOL_TYPES or kind.startswith(_HOSTED_DATED_PREFIXES))


def flat_name(namespace: str, name: str) -> str:
    """Codex's own flat spelling of a namespaced tool (``canonical_flat_name``): ``mcp__github`` + ``get_issue``."""
    return f"{namespace.rstrip('_')}{_JOINT}{name.lstrip('_')}"


def custom_tool_description(
    description: str, fmt: Mapping[str, Any] | None, path: str, grammar_key: str | None = None
) -> str:
    """Quirk: the upstream only knows JSON functions, so a freeform tool's grammar (Codex's ``apply_patch`` lark
    grammar) is spelled out in the description, or the model would not know what input shape to write.

    Responses puts the grammar's ``syntax`` and ``definition`` in the format itself; Chat nests them one level deeper,
    under ``grammar_key``."""
    if fmt is None:
        return description
    kind = check.string(fmt.get("type"), f"{path}.type")
    if kind == "text":
        return description
    if kind != "grammar":
        raise RequestError(f"{path}.type: unsupported custom tool format {kind!r}")
    if grammar_key is not None:
        path = f"{path}.{grammar_key}"
        fmt = check.obj(fmt.get(grammar_key), path)
    syntax = check.opt_str(fmt.get("syntax"), f"{path}.syntax") or "lark"
    return ir.with_grammar(description, syntax, check.string(fmt.get("definition"), f"{path}.definition"))


def decode_tools(raw: Any) -> tuple[ir.Tool, ...]:
    """``tools`` -> IR tools in the order offered, namespace members flattened in place under names nothing shares."""
    if raw is None:
        return ()
    entries = [(f"tools[{i}]", check.obj(t, f"tools[{i}]")) for i, t in drop_hosted_tools(check.array(raw, "tools"))]
    # plain tools keep their names; a namespace member whose flat name is taken gets a numbered one
    taken = {t["name"] for _, t in entries if t.get("type") in _PLAIN and isinstance(t.get("name"), str)}
    tools: list[ir.Tool] = []
    for path, tool in entries:
        kind = check.string(tool.get("type"), f"{path}.type")
        if kind == "namespace":
            tools.extend(_namespace_members(tool, path, taken))
        else:
            tools.append(_plain_tool(tool, kind, path))
    return tuple(tools)


def flat_names(tools: tuple[ir.Tool, ...]) -> dict[tuple[str, str], str]:
    """The request's own namespace -> flat name map, so history items that name a namespace map to the same tool."""
    return {(t.namespaced.namespace, t.namespaced.name): t.name for t in tools if t.namespaced is not None}


def call_name(name: str, namespace: str | None, names: FlatNames) -> str:
    """The IR name of a call item from the history: a namespaced call is named as its tool was offered upstream."""
    if namespace is None:
        return name
    return names.get((namespace, name)) or flat_name(namespace, name)


def _plain_tool(tool: Mapping[str, Any], kind: str, path: str) -> ir.Tool:
    if kind not in _PLAIN:
        raise RequestError(f"{path}.type: unsupported tool type {kind!r}")
    name = check.string(tool.get("name"), f"{path}.name")
    description = check.opt_str(tool.get("description"), f"{path}.description") or ""
    if kind == "function":
        params = tool.get("parameters")
        parameters = dict(_EMPTY_SCHEMA) if params is None else dict(check.obj(params, f"{path}.parameters"))
        return ir.Tool(name=name, description=description, parameters=parameters)
    fmt_obj = check.opt_obj(tool.get("format"), f"{path}.format")
    return ir.Tool(
        name=name,
        description=custom_tool_description(description, fmt_obj, f"{path}.format"),
        parameters=ir.custom_tool_parameters(),
        kind="custom",
    )


def _namespace_members(tool: Mapping[str, Any], path: str, taken: set[str]) -> list[ir.Tool]:
    """One namespace group -> its members as flat IR tools; ``taken`` gains each name given out.

    The group's description would otherwise never reach the model (it sees flat functions only), so the first member
    carries it; the members are listed together, so once is enough.
    """
    namespace = check.string(tool.get("name"), f"{path}.name")
    group_note = check.opt_str(tool.get("description"), f"{path}.description") or ""
    out: list[ir.Tool] = []
    for j, raw_member in enumerate(check.array(tool.get("tools"), f"{path}.tools")):
        member_path = f"{path}.tools[{j}]"
        member = check.obj(raw_member, member_path)
        plain = _plain_tool(member, check.string(member.get("type"), f"{member_path}.type"), member_path)
        flat = _unique(flat_name(namespace, plain.name), taken)
        taken.add(flat)
        description = plain.description
        if j == 0 and group_note:
            description = f"{group_note}\n\n{description}" if description else group_note
        out.append(
            ir.Tool(
                name=flat,
                description=description,
                parameters=plain.parameters,
                kind=plain.kind,
                namespaced=ir.Namespaced(namespace, plain.name),
            )
        )
    return out


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    n = 2
    while f"{name}_{n}" in taken:
        n += 1
    return f"{name}_{n}"


def decode_tool_choice(raw: Any, names: FlatNames) -> ir.ToolChoice | None:
    """``tool_choice``; a forced tool that names a namespace is forced under its flat name."""
    if raw is None:
        return None
    if raw == "auto" or raw == "none" or raw == "required":
        return ir.ToolChoice(mode=raw)
    if isinstance(raw, str):
        raise RequestError(f"tool_choice: unsupported value {raw!r}")
    choice = check.obj(raw, "tool_choice")
    kind = check.string(choice.get("type"), "tool_choice.type")
    if kind in ("function", "custom"):
        name = check.string(choice.get("name"), "tool_choice.name")
        namespace = check.opt_str(choice.get("namespace"), "tool_choice.namespace")
        return ir.ToolChoice(mode="tool", name=call_name(name, namespace, names))
    raise RequestError(f"tool_choice.type: unsupported tool choice {kind!r}")

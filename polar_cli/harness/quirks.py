"""What the gateway does for each harness's own traffic, one line per quirk, for `polar harnesses` and the docs.

The gateway never asks which harness is calling: it decodes by API, and every quirk below is a codec rule that fires
for any request of that shape. Each line names where the rule lives, so this table can be checked against the code
(`translate/`), and it lists only rules that were written for (and are exercised by) that harness's recorded
traffic (docs/harnesses.md "Recorded traffic"). A new adapter adds its own entry to `BY_HARNESS`; none is a valid
answer. `HarnessAdapter.quirks` reads this table (`quirks_of`), so an adapter never names its own entry.
"""

from __future__ import annotations

from polar_cli.translate.codec import ApiName

CLAUDE_CODE = (
    "system block 0 `x-anthropic-billing-header` dropped (anthropic_messages._quirk_drop_billing_header)",
    "role=system turns inside messages kept in place as system messages (anthropic_messages._quirk_system_turn)",
    "ToolSearch `tool_reference` blocks read as the text 'Tool loaded: NAME'"
    " (anthropic_messages._quirk_tool_reference)",
    "Anthropic server tools (dated types, mcp_toolset) not offered (anthropic_messages._is_server_tool)",
)
CODEX = (
    "freeform `apply_patch` (custom tool, lark grammar) offered as a one-string function, grammar in its description"
    " (openai_responses_tools.custom_tool_description)",
    "hosted tool types (tool_search, web_search, ...) hidden from the model (openai_responses_tools.drop_hosted_tools)",
    "`namespace` tool groups offered as <namespace>__<name> functions, calls answered as name + namespace"
    " (openai_responses_tools.flat_name)",
    "context overflow told as `response.failed` (context_length_exceeded) inside a 200 SSE stream"
    " (openai_responses_encode)",
)
QWEN_CODE = (
    "tool message content as a list of text parts joined with newlines (openai_chat._join_tool_text_parts)",
    "stream_options.include_usage: a usage chunk before [DONE] (openai_chat_encode)",
)
GEMINI_CLI = (
    "function schemas read from parametersJsonSchema or parameters, under both proto3 spellings (google_genai_config)",
    "OpenAPI uppercase schema types lowered (google_genai_config.quirk_uppercase_schema_types)",
    "router call's responseJsonSchema (JSON mode) sent upstream as response_format (google_genai_config)",
    "parts holding only a thoughtSignature skipped (google_genai.quirk_signature_only_part)",
    "Google-hosted tools not offered (google_genai_config.quirk_drop_builtin_tool)",
    "arguments that are not a JSON object travel as _raw_arguments and come back verbatim"
    " (google_genai_encode.quirk_wrap_invalid_arguments)",
)
# Pi speaks any of four APIs; which rules its traffic meets depends on the one its adapter picks
PI: dict[ApiName, tuple[str, ...]] = {
    "openai_chat": ("`developer` role read as system (openai_chat)",),
    "openai_responses": ("system prompt as a typeless `developer` item read as a system message (openai_responses)",),
    "anthropic_messages": ("tool flag eager_input_streaming ignored (anthropic_messages)",),
    "google_genai": (
        "functionResponse without an id answers the earliest unanswered call of its name"
        " (google_genai.quirk_link_response_by_name)",
    ),
}
# opencode and Cline both stream Chat Completions through the AI SDK's openai-compatible provider
OPENCODE = ("stream_options.include_usage: a usage chunk before [DONE] (openai_chat_encode)",)
CLINE = OPENCODE
# Hermes streams Chat Completions through the OpenAI SDK with stream_options.include_usage, like the two above
HERMES = OPENCODE

# built-in harness name -> its quirks; Pi's are in `PI`, by the API its adapter speaks
BY_HARNESS: dict[str, tuple[str, ...]] = {
    "claude-code": CLAUDE_CODE,
    "codex": CODEX,
    "qwen-code": QWEN_CODE,
    "gemini-cli": GEMINI_CLI,
    "opencode": OPENCODE,
    # Kilo is an opencode fork: the same provider, the same traffic
    "kilo": OPENCODE,
    "cline": CLINE,
    "hermes": HERMES,
}


def quirks_of(harness: str, api: ApiName | None) -> tuple[str, ...]:
    """The quirks the gateway's codecs apply to ``harness``'s traffic in ``api``; () for a harness with none."""
    if harness == "pi" and api is not None:
        return PI[api]
    return BY_HARNESS.get(harness, ())

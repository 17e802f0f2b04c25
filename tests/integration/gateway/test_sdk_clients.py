"""The official SDKs as clients of a real gateway, against an upstream speaking SGLang's (or vLLM's) exact wire format.

Each test runs a text turn and a tool-call round trip, plain and streaming, then checks what the gateway captured:
prompt ids equal to what the upstream rendered for the normalised messages, and one logprob per sampled id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as gtypes

from polar_cli.capture import CaptureRecord, read_session
from polar_cli.capture.store import session_file
from tests.support.gateway import RunningGateway, running_gateway
from tests.support.sglang_double import ContextLengthError, ErrorReply, Reply, SGLangDouble, ToolCallReply

DIALECTS = ["sglang", "sglang-legacy", "vllm"]


@pytest.fixture(params=DIALECTS)
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[SGLangDouble, RunningGateway]]:
    dialect = request.param
    engine = dialect
    with (
        SGLangDouble(dialect=dialect) as upstream,
        running_gateway(upstream.url, tmp_path / "capture", dialect_name=engine, model="polar-test-model") as gw,
    ):
        yield upstream, gw


def captured(gw: RunningGateway, session_id: str) -> list[CaptureRecord]:
    gw.flush()
    return read_session(session_file(gw.capture_dir, session_id))


def check_capture(upstream: SGLangDouble, records: list[CaptureRecord], calls: int) -> None:
    """Every call was captured with the exact prompt ids the upstream computed, and whole sampled ids."""
    assert [r.status for r in records] == ["ok"] * calls
    seen = upstream.chat_requests[-calls:]
    for record, request in zip(records, seen, strict=True):
        assert record.normalized == request.body
        assert record.prompt_ids == list(request.prompt_ids or ())
        assert record.prompt_ids == upstream.tokenize(request.body["messages"], request.body.get("tools"))
        assert len(record.response_ids) == len(record.response_logprobs) > 0
        assert record.response is not None
        assert record.response["usage"]["completion_tokens"] == len(record.response_ids)
    upstream.assert_no_rejections()


BASH = {
    "name": "Bash",
    "description": "Run a shell command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}


def test_anthropic_sdk(stack: tuple[SGLangDouble, RunningGateway]) -> None:
    upstream, gw = stack
    key = gw.open_session("anthropic-session")
    client = anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0)
    upstream.add(
        Reply("Hello there."),
        Reply("Let me look.", reasoning="I should list files.", tool_calls=(ToolCallReply("Bash", {"command": "ls"}),)),
        Reply("There is one file."),
    )
    first = client.messages.create(model="claude-x", max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    assert first.content[0].type == "text" and first.content[0].text == "Hello there."
    assert first.stop_reason == "end_turn" and first.model == "claude-x"

    history: list[anthropic.types.MessageParam] = [{"role": "user", "content": "what is here?"}]
    with client.messages.stream(model="claude-x", max_tokens=100, messages=history, tools=[BASH]) as stream:
        second = stream.get_final_message()
    kinds = [b.type for b in second.content]
    assert kinds == ["thinking", "text", "tool_use"] and second.stop_reason == "tool_use"
    tool_use = second.content[2]
    assert tool_use.type == "tool_use" and tool_use.input == {"command": "ls"} and tool_use.name == "Bash"
    history += [
        {"role": "assistant", "content": second.content},  # type: ignore[typeddict-item]
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "a.txt"}]},
    ]
    with client.messages.stream(model="claude-x", max_tokens=100, messages=history, tools=[BASH]) as stream:
        third = stream.get_final_message()
    assert third.content[-1].type == "text" and third.content[-1].text == "There is one file."
    sent = upstream.chat_requests[-1].body["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": tool_use.id, "content": "a.txt"}
    check_capture(upstream, captured(gw, "anthropic-session"), 3)


CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "run_shell_command",
        "description": "Run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}


def test_openai_chat_sdk(stack: tuple[SGLangDouble, RunningGateway]) -> None:
    upstream, gw = stack
    key = gw.open_session("chat-session")
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
    upstream.add(
        Reply("Plain answer."),
        Reply(tool_calls=(ToolCallReply("run_shell_command", {"command": "echo hi"}),)),
        Reply("Done."),
    )
    plain = client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "hi"}])
    assert plain.choices[0].message.content == "Plain answer." and plain.usage is not None
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "make a file"}]}]
    chunks = list(
        client.chat.completions.create(
            model="qwen",
            messages=messages,  # type: ignore[arg-type]
            tools=[CHAT_TOOL],  # type: ignore[list-item]
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    calls = [tc for c in chunks for choice in c.choices for tc in (choice.delta.tool_calls or [])]
    call_id = calls[0].id
    assert call_id and calls[0].function and calls[0].function.name == "run_shell_command"
    arguments = "".join(tc.function.arguments or "" for tc in calls if tc.function)
    assert json.loads(arguments) == {"command": "echo hi"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function",
         "function": {"name": "run_shell_command", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": [{"type": "text", "text": "Exit Code: 0"}]},
    ]  # fmt: skip
    final = client.chat.completions.create(model="qwen", messages=messages, tools=[CHAT_TOOL])  # type: ignore[arg-type,list-item]
    assert final.choices[0].message.content == "Done."
    assert upstream.chat_requests[-1].body["messages"][-1]["content"] == "Exit Code: 0"
    check_capture(upstream, captured(gw, "chat-session"), 3)


RESPONSES_TOOLS = [
    {"type": "function", "name": "exec_command", "description": "Run", "strict": False,
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch",
     "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
    {"type": "web_search"},
]  # fmt: skip


def test_openai_responses_sdk(stack: tuple[SGLangDouble, RunningGateway]) -> None:
    upstream, gw = stack
    key = gw.open_session("responses-session")
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    upstream.add(
        Reply(
            tool_calls=(ToolCallReply("exec_command", {"cmd": "ls"}), ToolCallReply("apply_patch", {"input": patch}))
        ),
        Reply("All done."),
    )
    items: list[dict] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be brief"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "add a file"}]},
    ]
    with client.responses.stream(model="gpt-x", input=items, tools=RESPONSES_TOOLS, store=False) as stream:  # type: ignore[arg-type]
        first = stream.get_final_response()
    kinds = [o.type for o in first.output]
    assert kinds == ["function_call", "custom_tool_call"]
    fc, ctc = first.output
    assert fc.type == "function_call" and json.loads(fc.arguments) == {"cmd": "ls"}
    assert ctc.type == "custom_tool_call" and ctc.input == patch
    items += [
        {"type": "function_call", "call_id": fc.call_id, "name": fc.name, "arguments": fc.arguments},
        {"type": "custom_tool_call", "call_id": ctc.call_id, "name": ctc.name, "input": ctc.input},
        {"type": "function_call_output", "call_id": fc.call_id, "output": "a.txt"},
        {"type": "custom_tool_call_output", "call_id": ctc.call_id, "output": "Success"},
    ]
    second = client.responses.create(model="gpt-x", input=items, tools=RESPONSES_TOOLS, store=False)  # type: ignore[arg-type]
    assert second.output_text == "All done." and second.status == "completed"
    assert fc.call_id != ctc.call_id
    sent = upstream.chat_requests[-1].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["exec_command", "apply_patch"]
    assert sent["messages"][0]["role"] == "system"
    check_capture(upstream, captured(gw, "responses-session"), 2)


def test_google_genai_sdk(stack: tuple[SGLangDouble, RunningGateway]) -> None:
    upstream, gw = stack
    key = gw.open_session("google-session")
    client = genai.Client(api_key=key, http_options=gtypes.HttpOptions(base_url=gw.url))
    upstream.add(
        Reply('{"complexity_reasoning": "easy", "complexity_score": 2}'),
        Reply(tool_calls=(ToolCallReply("run_shell_command", {"command": "ls"}),)),
        Reply("Found it."),
    )
    schema = {
        "type": "object",
        "properties": {"complexity_reasoning": {"type": "string"}, "complexity_score": {"type": "integer"}},
    }
    router = client.models.generate_content(
        model="gemini-flash",
        contents="classify",
        config=gtypes.GenerateContentConfig(response_mime_type="application/json", response_json_schema=schema),
    )
    assert router.parsed == {"complexity_reasoning": "easy", "complexity_score": 2}
    assert upstream.chat_requests[-1].body["response_format"]["type"] == "json_schema"
    tool = gtypes.Tool(
        function_declarations=[
            gtypes.FunctionDeclaration(
                name="run_shell_command",
                description="Run",
                parameters_json_schema={"type": "object", "properties": {"command": {"type": "string"}}},
            )
        ]
    )
    config = gtypes.GenerateContentConfig(tools=[tool], automatic_function_calling={"disable": True})
    contents: list[gtypes.Content] = [gtypes.Content(role="user", parts=[gtypes.Part(text="list")])]
    chunks = list(client.models.generate_content_stream(model="gemini-pro", contents=contents, config=config))
    calls = [p.function_call for c in chunks for p in (c.candidates[0].content.parts or []) if p.function_call]  # type: ignore[index,union-attr]
    assert len(calls) == 1 and calls[0].name == "run_shell_command" and calls[0].args == {"command": "ls"}
    contents += [
        gtypes.Content(role="model", parts=[gtypes.Part(function_call=calls[0])]),
        gtypes.Content(
            role="user",
            parts=[gtypes.Part.from_function_response(name="run_shell_command", response={"output": "a.txt"})],
        ),
    ]
    final = client.models.generate_content(model="gemini-pro", contents=contents, config=config)
    assert final.text == "Found it."
    check_capture(upstream, captured(gw, "google-session"), 3)


def test_errors_reach_each_sdk_in_its_own_shape(tmp_path: Path) -> None:
    with (
        SGLangDouble(context_len=50) as upstream,
        running_gateway(upstream.url, tmp_path / "cap", model="polar-test-model") as gw,
    ):
        key = gw.open_session("errors")
        ant = anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0)
        oai = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
        msgs = [{"role": "user", "content": "hi"}]

        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=gw.url, api_key="sk-unknown", max_retries=0).messages.create(
                model="m",
                max_tokens=5,
                messages=msgs,  # type: ignore[arg-type]
            )
        upstream.add(ErrorReply(503, "server busy", "ServiceUnavailable"))
        with pytest.raises(openai.InternalServerError) as oerr:
            oai.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
        assert oerr.value.status_code == 503
        upstream.add(ErrorReply(429, "slow down", "RateLimit"))
        with pytest.raises(openai.APIStatusError) as rerr:
            oai.responses.create(model="m", input="hi")
        assert rerr.value.status_code == 503  # never a 429: Codex does not retry those

        upstream.add(ContextLengthError(context_len=5))
        with pytest.raises(anthropic.BadRequestError) as aerr:
            ant.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "a long prompt " * 20}])
        assert "prompt is too long" in str(aerr.value)
        upstream.add(ContextLengthError(context_len=5))
        with pytest.raises(openai.BadRequestError) as cerr:
            oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "x " * 50}])
        assert cerr.value.code == "context_length_exceeded"
        upstream.add(ContextLengthError(context_len=5))
        stream = oai.responses.create(model="m", input="y " * 50, stream=True)
        events = [e.type for e in stream]
        assert events[-1] == "response.failed"  # Codex reads a context overflow only in-stream

        upstream.add(Reply("no ids", token_ids=False))
        with pytest.raises(anthropic.APIStatusError) as nerr:
            ant.messages.create(model="m", max_tokens=5, messages=msgs)  # type: ignore[arg-type]
        assert nerr.value.status_code == 502 and "token ids" in str(nerr.value)

        with pytest.raises(anthropic.BadRequestError):
            ant.messages.create(model="m", max_tokens=5, messages=[{"role": "tool", "content": "x"}])  # type: ignore[list-item,typeddict-item]

        records = captured(gw, "errors")
        assert [r.status for r in records] == ["upstream_error"] * 6 + ["client_error"]
        assert "token ids" in (records[5].error or "")

"""The integration tier's scripted model: which tool it calls with which arguments, and when it stops."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.harness.shell_policy import ShellToolDouble, shell_policy

COMMAND = "printf %s ok > /testbed/x"


def tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


STRING = {"type": "string"}
TOOLS = {
    "Bash": tool("Bash", {"command": STRING, "description": STRING, "timeout": {"type": "number"}}, ["command"]),
    "exec_command": tool("exec_command", {"cmd": STRING, "workdir": STRING}, ["cmd"]),
    "run_shell_command": tool(
        "run_shell_command", {"command": STRING, "description": STRING}, ["command", "description"]
    ),
    "bash": tool("bash", {"command": STRING, "timeout": {"type": "number"}}, ["command"]),
}
OTHERS = [tool("Read", {"file_path": STRING}, ["file_path"]), tool("write_file", {"content": STRING}, ["content"])]


@pytest.mark.parametrize(
    ("shell", "arguments"),
    [
        ("Bash", {"command": COMMAND}),
        ("exec_command", {"cmd": COMMAND}),
        ("run_shell_command", {"command": COMMAND, "description": "polar test step"}),
        ("bash", {"command": COMMAND}),
    ],
)
def test_first_turn_calls_the_offered_shell_tool(shell: str, arguments: dict[str, Any]) -> None:
    body = {"messages": [{"role": "user", "content": "go"}], "tools": [*OTHERS, TOOLS[shell]]}
    reply = shell_policy(body, COMMAND)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [(shell, arguments)]


def test_after_a_tool_result_it_answers() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "(no output)"},
    ]
    reply = shell_policy({"messages": messages, "tools": [TOOLS["bash"]]}, COMMAND)
    assert reply.content == "done" and reply.tool_calls == ()


def test_without_a_shell_tool_it_answers() -> None:
    assert shell_policy({"messages": [], "tools": OTHERS}, COMMAND).content == "done"
    assert shell_policy({"messages": []}, COMMAND).content == "done"


def test_double_answers_each_call_by_the_policy() -> None:
    double = ShellToolDouble(COMMAND)
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [TOOLS["bash"]]}
    headers = {"content-type": "application/json"}
    status, raw = double.handle_post("/v1/chat/completions", json.dumps(body).encode(), headers)
    assert status == 200
    call = json.loads(raw)["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "bash" and json.loads(call["arguments"]) == {"command": COMMAND}
    double.assert_no_rejections()


def test_mini_swe_agent_is_made_to_submit_after_the_tool_result() -> None:
    messages = [
        {"role": "system", "content": "finish with `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`"},
        {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "(no output)"},
    ]
    reply = shell_policy({"messages": messages, "tools": [TOOLS["bash"]]}, COMMAND)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})
    ]


@pytest.mark.parametrize(
    ("system", "block"),
    [
        ("Reply with the entire file listing.", "x.txt\n```\nhi\n```\n"),
        ("Use *SEARCH/REPLACE* blocks.", "x.txt\n```\n<<<<<<< SEARCH\n=======\nhi\n>>>>>>> REPLACE\n```\n"),
    ],
)
def test_a_harness_without_tools_gets_an_edit_block(system: str, block: str) -> None:
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "go"}]}
    assert shell_policy(body, COMMAND, edit=("x.txt", "hi")).content == block

"""The gold policy: the shell tool of every recorded harness, the patch command run by a real bash in a real git
repository (hostile patches included), the turn sequence; and noop."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from polar_cli.inference.gold import (
    GOLD_DONE,
    NOOP_DONE,
    GoldPolicy,
    NoopPolicy,
    Task,
    apply_patch_command,
    find_shell_tool,
    offered_functions,
    shell_arguments,
)
from polar_cli.runtime.shell import heredoc_delimiter, needs_encoding
from polar_cli.translate.registry import CODECS, route_for_path
from polar_cli.translate.upstream import UpstreamOptions, chat_body

RECORDED = Path(__file__).resolve().parents[2] / "data" / "harness_requests"
EXPECTED = {
    "claude-code": ("Bash", "command"),
    "codex": ("exec_command", "cmd"),
    "gemini-cli": ("run_shell_command", "command"),
    "opencode": ("bash", "command"),
    "pi": ("bash", "command"),
    "qwen-code": ("run_shell_command", "command"),
}


def upstream_body(harness: str) -> dict[str, Any]:
    """The OpenAI Chat body the gateway sends upstream for the harness's first recorded request with tools."""
    for line in (RECORDED / f"{harness}.jsonl").read_text().splitlines():
        row = json.loads(line)
        route = route_for_path(row["path"]) if isinstance(row.get("body"), dict) else None
        if route is None:
            continue
        body = chat_body(CODECS[route.api].decode_request(row["body"], route), UpstreamOptions(), "rid")
        if body.get("tools"):
            return body
    raise AssertionError(f"no recorded {harness} request with tools")


@pytest.mark.parametrize("harness", sorted(EXPECTED))
def test_finds_each_harness_shell_tool_and_its_command_argument(harness: str) -> None:
    body = upstream_body(harness)
    functions = offered_functions(body)
    tool, arg = EXPECTED[harness]
    assert find_shell_tool(functions) == tool
    args = shell_arguments(functions[tool], "echo hi")
    assert args[arg] == "echo hi"
    required = functions[tool]["parameters"].get("required") or []
    assert set(required) <= set(args), f"{tool} needs {required}, got {sorted(args)}"

    turn = GoldPolicy().next_turn(body, Task("i", "diff --git a/x b/x\n", "/testbed"))
    assert turn.content == "" and [name for name, _ in turn.tool_calls] == [tool]
    command = turn.tool_calls[0][1][arg]
    # Codex refuses rm -f; Gemini CLI refuses command substitution even inside a quoted heredoc
    assert "rm -f" not in command and not needs_encoding(command.split("\n", 1)[1])


def test_turns_tool_call_then_final_and_noop_never_acts() -> None:
    body = upstream_body("pi")
    task = Task("i", "diff --git a/x b/x\n", "/testbed")
    assert GoldPolicy().next_turn(body, task).tool_calls
    answered = {**body, "messages": [*body["messages"], {"role": "tool", "tool_call_id": "c", "content": "ok"}]}
    assert GoldPolicy().next_turn(answered, task).content == GOLD_DONE
    assert GoldPolicy().next_turn({**body, "tools": []}, task).tool_calls == ()  # a side request without tools
    assert GoldPolicy().next_turn(body, None).tool_calls == ()  # a call no session is bound to
    assert GoldPolicy().next_turn(body, Task("i", "  ", "/testbed")).tool_calls == ()
    assert NoopPolicy().next_turn(body, task).content == NOOP_DONE
    assert NoopPolicy().next_turn(body, task).tool_calls == ()


def test_a_tool_with_no_known_name_is_found_by_its_schema() -> None:
    functions = {
        "read": {"name": "read", "parameters": {"properties": {"path": {"type": "string"}}}},
        "terminal": {
            "name": "terminal",
            "parameters": {
                "properties": {"cmd": {"type": "string"}, "why": {"type": "string"}, "bg": {"type": "boolean"}},
                "required": ["cmd", "why", "bg"],
            },
        },
    }
    assert find_shell_tool(functions) == "terminal"
    expected = {"cmd": "ls", "why": "Apply the fix for the issue", "bg": False}
    assert shell_arguments(functions["terminal"], "ls") == expected
    assert find_shell_tool({"read": functions["read"]}) is None


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_patch(repo: Path, files: dict[str, bytes]) -> str:
    """A git patch (against HEAD) that turns the repo's files into ``files``; the work tree is reset afterwards."""
    for name, data in files.items():
        (repo / name).write_bytes(data)
    git(repo, "add", "-A")
    patch = subprocess.run(
        ["git", "diff", "--cached", "--binary"], cwd=repo, check=True, capture_output=True
    ).stdout.decode("utf-8")
    git(repo, "reset", "-q", "--hard", "HEAD")
    return patch


HOSTILE = {
    "plain.py": b"def f():\n    return 1\n",
    "ticks.py": b'"""Use ``path`` and `x` and $(rm -rf /) and <(cat) and ${HOME}."""\n',
    "crlf.txt": b"one\r\ntwo\r\n",
    "unicode.txt": "caf\u00e9 \u65e5\u672c \U0001f680 \\n 'q' \"dq\"\n".encode(),
    "tabs.txt": b"\tindented\t\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_command_applies_the_patch_byte_for_byte(name: str, tmp_path: Path) -> None:
    repo = tmp_path / "testbed"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / name).write_bytes(b"original\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    patch = make_patch(repo, {name: HOSTILE[name], "new_file.txt": b"created\n"})
    command = apply_patch_command(patch, str(repo))
    assert needs_encoding(patch) == (name in ("ticks.py", "crlf.txt"))
    if needs_encoding(patch):
        assert "`" not in command and "$(" not in command and "base64 -d" in command
    else:
        assert patch in command  # readable in the trajectory
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (repo / name).read_bytes() == HOSTILE[name]
    assert (repo / "new_file.txt").read_bytes() == b"created\n"
    # it can be run again only as a no-op failure: the patch is not applied twice
    assert subprocess.run(["bash", "-c", command], capture_output=True).returncode != 0


def test_heredoc_delimiter_is_never_a_line_of_the_text() -> None:
    text = "a\nb\n"
    first = heredoc_delimiter(text)
    assert first not in text.splitlines()
    clashing = text + first + "\n"
    assert heredoc_delimiter(clashing) not in clashing.splitlines()


PATCH_TEXT = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
CLINE_TOOL = {
    "type": "function",
    "function": {
        "name": "run_commands",
        "parameters": {
            "type": "object",
            "properties": {"commands": {"type": "array", "items": {"type": "string"}}},
            "required": ["commands"],
        },
    },
}


def test_a_shell_tool_that_takes_a_list_of_commands_gets_one() -> None:
    body = {"messages": [{"role": "user", "content": "fix it"}], "tools": [CLINE_TOOL]}
    turn = GoldPolicy().next_turn(body, Task("i", PATCH_TEXT))
    ((name, args),) = turn.tool_calls
    assert name == "run_commands" and args == {"commands": [apply_patch_command(PATCH_TEXT, "/testbed")]}


def function_tool(name: str, properties: dict[str, object], required: list[str]) -> dict[str, object]:
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def test_hermes_terminal_is_its_shell_tool_among_its_other_tools() -> None:
    """Hermes offers file, code and process tools beside `terminal`; the patch goes through `terminal` alone."""
    tools = [
        function_tool("execute_code", {"code": {"type": "string"}}, ["code"]),
        function_tool("process", {"action": {"type": "string"}, "data": {"type": "string"}}, ["action"]),
        function_tool("patch", {"mode": {"type": "string"}, "patch": {"type": "string"}}, ["mode"]),
        function_tool("terminal", {"command": {"type": "string"}, "background": {"type": "boolean"}}, ["command"]),
        function_tool("write_file", {"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"]),
    ]
    body = {"messages": [{"role": "user", "content": "fix it"}], "tools": tools}
    turn = GoldPolicy().next_turn(body, Task("i", PATCH_TEXT))
    ((name, args),) = turn.tool_calls
    assert name == "terminal" and args == {"command": apply_patch_command(PATCH_TEXT, "/testbed")}


def apply_blocks(text: str, reply: str) -> str:
    """Aider's diff format applied the way Aider applies it: each SEARCH text replaced once by its REPLACE text."""
    for block in reply.split("<<<<<<< SEARCH\n")[1:]:
        search, rest = block.split("=======\n", 1)
        replace = rest.split(">>>>>>> REPLACE", 1)[0]
        assert text.count(search) == 1, search
        text = text.replace(search, replace)
    return text


def test_an_editor_without_tools_gets_the_patch_as_search_replace_blocks(tmp_path: Path) -> None:
    before = "".join(f"line {i}\n" for i in range(1, 21))
    (tmp_path / "a.txt").write_text(before)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    after = before.replace("line 3\n", "line three\n").replace("line 17\n", "line 17\nline 17b\n")
    (tmp_path / "a.txt").write_text(after)
    patch = subprocess.run(["git", "diff"], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    system = {"role": "system", "content": "Reply with *SEARCH/REPLACE* blocks."}
    example = {"role": "assistant", "content": "an example of a SEARCH/REPLACE block"}
    body = {"messages": [system, example, {"role": "user", "content": "fix it"}]}
    turn = GoldPolicy().next_turn(body, Task("i", patch))
    assert turn.tool_calls == () and turn.content.startswith("a.txt\n```\n<<<<<<< SEARCH\n")
    assert apply_blocks(before, turn.content) == after
    # Aider asks again once it has added the file to its chat; after the second answer it is done
    again = {"messages": [*body["messages"], {"role": "assistant", "content": turn.content}]}
    assert GoldPolicy().next_turn(again, Task("i", patch)).content == turn.content
    done = {"messages": [*again["messages"], {"role": "assistant", "content": turn.content}]}
    assert GoldPolicy().next_turn(done, Task("i", patch)).content == GOLD_DONE

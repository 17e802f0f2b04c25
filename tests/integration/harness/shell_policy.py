"""A scripted model that drives a real harness through one shell-tool round trip, on the SGLang test double.

The policy reads the tool definitions the harness sent (already normalised to OpenAI Chat by the gateway): while no
tool result is in the conversation it calls the harness's own shell tool (Bash, exec_command, run_shell_command,
bash, run_commands, terminal or exec, whichever is offered) with a given command; once a tool result is there it answers
with a final message, or, for mini-swe-agent, which only ends on its submit command, calls that. A harness without tools
(aider) gets a reply with an edit block writing a given file instead, in the edit format its system prompt asks for;
Terminus-2, which has no tools either but asks for JSON with the keystrokes to type into its terminal, gets the
keystrokes of a command writing that file, then `task_complete` (which it asks to have confirmed, so every later turn
says it again).
"""

from __future__ import annotations

import json
import shlex
import threading
from typing import Any

from polar_cli.inference.gold import asks_for_keystrokes, keystrokes_answer
from tests.support.sglang_double import Reply, SGLangDouble, ToolCallReply

CHAT_PATH = "/v1/chat/completions"
# every harness's shell tool, by the name it gives it
SHELL_TOOLS = ("Bash", "exec_command", "run_shell_command", "bash", "run_commands", "terminal", "exec")
# the argument that carries the command line, by preference (Cline's run_commands takes a list of them)
COMMAND_ARGS = ("command", "cmd", "commands")
FINAL_MESSAGE = "done"
# mini-swe-agent ends a run only when a command prints this first (its prompt says so)
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def offered_tools(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Function tools of a chat request, by name."""
    out = {}
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            out[function["name"]] = function
    return out


def shell_arguments(function: dict[str, Any], command: str) -> dict[str, Any]:
    """Arguments for a shell tool: the command under the name its schema uses, other required strings filled."""
    schema = function.get("parameters") or {}
    properties = schema.get("properties") or {}
    key = next((k for k in COMMAND_ARGS if k in properties), None)
    if key is None:
        raise AssertionError(f"shell tool {function.get('name')} takes none of {COMMAND_ARGS}: {sorted(properties)}")
    args: dict[str, Any] = {key: [command] if (properties[key] or {}).get("type") == "array" else command}
    for name in schema.get("required") or []:
        if name not in args and (properties.get(name) or {}).get("type") == "string":
            args[name] = "polar test step"
    return args


def has_tool_result(body: dict[str, Any]) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "tool" for m in body.get("messages") or [])


def asks_for_submit(body: dict[str, Any]) -> bool:
    """The harness's prompt names the submit command and no call has run it yet."""
    text = json.dumps(body.get("messages") or [])
    return SUBMIT in text and f"echo {SUBMIT}" not in json.dumps([m.get("tool_calls") for m in body["messages"]])


def edit_reply(body: dict[str, Any], path: str, content: str) -> Reply:
    """Aider's edit block creating `path`: SEARCH/REPLACE when its system prompt asks for that, else a whole file."""
    system = " ".join(str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "system")
    if "SEARCH/REPLACE" in system:
        return Reply(f"{path}\n```\n<<<<<<< SEARCH\n=======\n{content}\n>>>>>>> REPLACE\n```\n")
    return Reply(f"{path}\n```\n{content}\n```\n")


def keystrokes_reply(commands: list[str], complete: bool) -> Reply:
    """A Terminus-2 answer (the gold engine's format): each command typed with its Enter, then whether the task is
    complete."""
    return Reply(keystrokes_answer(commands, complete, duration=0.5))


def shell_policy(body: dict[str, Any], command: str, edit: tuple[str, str] | None = None) -> Reply:
    """The next scripted turn for one request (`edit`: the file and content a harness without tools writes)."""
    tools = offered_tools(body)
    shell = next((name for name in SHELL_TOOLS if name in tools), None)
    if shell is None and asks_for_keystrokes(body):
        if edit is None:
            return keystrokes_reply([], complete=True)
        path, content = edit
        return keystrokes_reply([f"printf '%s\\n' {shlex.quote(content)} > {shlex.quote(path)}"], complete=False)
    if shell is None and edit is not None:
        return edit_reply(body, *edit)
    if shell is not None and has_tool_result(body) and asks_for_submit(body):
        return Reply(tool_calls=(ToolCallReply(shell, shell_arguments(tools[shell], f"echo {SUBMIT}")),))
    if shell is None or has_tool_result(body):
        return Reply(FINAL_MESSAGE)
    return Reply(tool_calls=(ToolCallReply(shell, shell_arguments(tools[shell], command)),))


class ShellToolDouble(SGLangDouble):
    """The SGLang double, answering each chat call with `shell_policy` (one call at a time); `edit` (path, content)
    is the first reply to a harness that offers no tools, later ones get the final message."""

    def __init__(self, command: str, edit: tuple[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.command = command
        self.edit = edit
        self._policy_lock = threading.Lock()

    def handle_post(self, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        if path != CHAT_PATH:
            return super().handle_post(path, raw, headers)
        try:
            body = json.loads(raw)
        except ValueError:
            return super().handle_post(path, raw, headers)
        with self._policy_lock:
            if isinstance(body, dict):
                self.add(shell_policy(body, self.command, self.edit))
                if self.edit is not None and not offered_tools(body):
                    self.edit = None
            return super().handle_post(path, raw, headers)

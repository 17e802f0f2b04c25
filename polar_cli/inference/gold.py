"""Scripted policies: gold (apply the reference patch, or run a Harbor task's oracle, with the harness's own shell
tool) and noop (do nothing).

Gold validates instances and harness wiring without a GPU. It reads the tool definitions the harness sent (already
normalised to OpenAI Chat by the gateway), finds the harness's shell tool (Claude Code's Bash, Codex's exec_command,
Qwen Code's and Gemini CLI's run_shell_command, Pi's bash, Hermes's terminal, or any tool whose schema takes a
``command``/``cmd`` string), and while none of its calls has a result yet, calls it with a command that writes the
patch to a file through a quoted heredoc and applies it in the workdir. Once a result is in the conversation it ends
with a short final message. Through a real harness it yields an accepted trajectory for every valid instance. A
Harbor task has no patch: its `Task.command` (the oracle, `harbor.verify.oracle_command`: solution/ written to
/solution and solve.sh run) is the one call instead, so only the gold engine ever sees the solution.

A harness without tools that types into a terminal (Terminus-2: each answer a JSON object of `keystrokes`) gets the
solution as one typed line, `printf %s BASE64 | base64 -d | bash` (plain text would meet the terminal's line editing:
a tab in a patch completes a file name) that prints its exit status when done; gold waits (empty keystrokes, as the
harness's prompt says) until the terminal shows it, then says `task_complete`, which such a harness asks to have
confirmed.

Noop answers every call with a final message and changes nothing: the negative control, every attempt must be
rejected. To a keystroke harness its final message is `task_complete` with nothing typed, so that session ends too.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from polar_cli.runtime.shell import heredoc_delimiter, needs_encoding
from polar_cli.swe.diffs import hunks, split_patch

# known shell tools first, in case a harness offers two tools that take a command
SHELL_TOOLS = ("Bash", "bash", "exec_command", "run_shell_command", "shell", "run_commands", "terminal")
COMMAND_ARGS = ("command", "cmd", "commands")
PATCH_FILE = "/tmp/polar-gold.patch"
GOLD_DONE = "I applied the fix for the issue; the change is in the working tree."
NOOP_DONE = "I looked at the task and left the repository unchanged."
DESCRIPTION = "Apply the fix for the issue"
# what gold's typed line prints when it is done, followed by `=` and its exit status
TYPED_DONE = "polar-gold exit"
_TYPED_EXIT = re.compile(re.escape(TYPED_DONE) + r"=\d+")
WAIT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Task:
    """What a scripted policy knows about the session it answers: the instance's reference patch and workdir, or the
    command that solves it (a Harbor task's oracle)."""

    instance_id: str
    patch: str
    workdir: str = "/testbed"
    command: str | None = None

    def solution(self) -> str | None:
        """The shell text gold runs: the command, else the patch applied; None when there is neither."""
        if self.command:
            return self.command
        return apply_patch_command(self.patch, self.workdir) if self.patch.strip() else None


@dataclass(frozen=True, slots=True)
class ScriptedTurn:
    """One assistant turn: text, tool calls (name, arguments) and the reasoning before them."""

    content: str
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    reasoning: str | None = None


class Policy(Protocol):
    name: str

    def next_turn(self, body: Mapping[str, Any], task: Task | None) -> ScriptedTurn: ...


def offered_functions(body: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The function tools of a chat request, by name."""
    out: dict[str, Mapping[str, Any]] = {}
    for tool in body.get("tools") or ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            out[function["name"]] = function
    return out


def _properties(function: Mapping[str, Any]) -> Mapping[str, Any]:
    schema = function.get("parameters")
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return props if isinstance(props, Mapping) else {}


def command_argument(function: Mapping[str, Any]) -> str | None:
    """The argument a shell tool takes its command line in, from its JSON schema."""
    props = _properties(function)
    for key in COMMAND_ARGS:
        spec = props.get(key)
        if isinstance(spec, Mapping) and (spec.get("type") in ("string", None) or _string_list(spec)):
            return key
    return None


def _string_list(spec: Mapping[str, Any]) -> bool:
    """A list of command lines (Cline's ``run_commands``: ``commands: [string]``)."""
    items = spec.get("items")
    return spec.get("type") == "array" and isinstance(items, Mapping) and items.get("type") in ("string", None)


def find_shell_tool(functions: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The harness's shell tool: a known name that takes a command, else the first tool that does."""
    for name in SHELL_TOOLS:
        if name in functions and command_argument(functions[name]) is not None:
            return name
    return next((name for name, fn in functions.items() if command_argument(fn) is not None), None)


def shell_arguments(function: Mapping[str, Any], command: str) -> dict[str, Any]:
    """Arguments for a shell tool call: the command, plus a value for every other required string or boolean."""
    key = command_argument(function)
    assert key is not None
    args: dict[str, Any] = {key: [command] if _string_list(_properties(function)[key]) else command}
    schema = function.get("parameters")
    required = schema.get("required") if isinstance(schema, Mapping) else None
    props = _properties(function)
    for name in required if isinstance(required, list) else ():
        spec = props.get(name)
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        if name in args:
            continue
        if kind == "string":
            args[name] = DESCRIPTION
        elif kind == "boolean":
            args[name] = False
    return args


def apply_patch_command(patch: str, workdir: str) -> str:
    """Shell text that writes ``patch`` to a file byte for byte and applies it in ``workdir``.

    The patch goes in a quoted heredoc (no expansion; readable in the trajectory), or base64-encoded in one when
    `needs_encoding` says a harness would refuse or alter the plain text. ``git apply`` first, ``patch -p1`` as
    SWE-bench's fallback (``--forward``: a harness that runs the command twice must not revert the fix). No cleanup
    step: Codex refuses commands with ``rm -f``, and the file is outside the repository.
    """
    body = patch if patch.endswith("\n") else patch + "\n"
    target = shlex.quote(PATCH_FILE)
    if needs_encoding(body):
        encoded = base64.encodebytes(body.encode()).decode()
        write = f"base64 -d > {target} <<'{heredoc_delimiter(encoded)}'\n{encoded}{heredoc_delimiter(encoded)}\n"
    else:
        write = f"cat > {target} <<'{heredoc_delimiter(body)}'\n{body}{heredoc_delimiter(body)}\n"
    apply = f"{{ git apply --verbose {target} || patch --batch --forward -p1 -i {target}; }}"
    return f"{write}cd {shlex.quote(workdir)} && {apply}"


def has_tool_result(body: Mapping[str, Any]) -> bool:
    """Whether the conversation holds a tool result. Any result counts: some APIs pair results with calls by name,
    not id (Gemini), and gold makes one call per session."""
    return any(isinstance(m, Mapping) and m.get("role") == "tool" for m in body.get("messages") or ())


def asks_for_edit_blocks(body: Mapping[str, Any]) -> bool:
    """Whether a tool-less request is an editor's (Aider's diff format): its system prompt asks for SEARCH/REPLACE."""
    return not body.get("tools") and any(
        isinstance(m, Mapping) and m.get("role") == "system" and "SEARCH/REPLACE" in str(m.get("content"))
        for m in body.get("messages") or ()
    )


def asks_for_keystrokes(body: Mapping[str, Any]) -> bool:
    """Whether a tool-less request is a terminal agent's (Terminus-2): its first user turn asks for JSON with the
    ``keystrokes`` to type and ``task_complete``."""
    if body.get("tools"):
        return False
    first = next((m for m in body.get("messages") or () if isinstance(m, Mapping) and m.get("role") == "user"), None)
    text = json.dumps(first.get("content")) if first is not None else ""
    return '\\"keystrokes\\"' in text and "task_complete" in text


def keystrokes_answer(commands: Sequence[str], complete: bool, duration: float = 1.0) -> str:
    """A terminal agent's answer: each command typed with its Enter (an empty one: wait), then whether the task is
    complete."""
    batch = [{"keystrokes": f"{command}\n" if command else "", "duration": duration} for command in commands]
    done = "The fix is applied." if complete else "Apply the fix."
    return json.dumps({"analysis": done, "plan": done, "commands": batch, "task_complete": complete})


def typed_line(command: str) -> str:
    """Shell text as one line with no character a terminal's line editor acts on (base64 piped to bash), that prints
    `TYPED_DONE` and its exit status when it is done (the line itself, echoed, shows ``$?`` there instead)."""
    return f'printf %s {base64.b64encode(command.encode()).decode()} | base64 -d | bash; echo "{TYPED_DONE}=$?"'


def terminal_shows_done(body: Mapping[str, Any]) -> bool:
    """Whether a terminal output the harness relayed shows the typed line finished."""
    return any(
        isinstance(m, Mapping) and m.get("role") == "user" and _TYPED_EXIT.search(str(m.get("content")))
        for m in body.get("messages") or ()
    )


def times_said(body: Mapping[str, Any], text: str) -> int:
    """How many assistant turns of the conversation hold ``text``."""
    return sum(
        isinstance(m, Mapping) and m.get("role") == "assistant" and text.strip() in str(m.get("content"))
        for m in body.get("messages") or ()
    )


class GoldPolicy:
    name = "gold"

    def next_turn(self, body: Mapping[str, Any], task: Task | None) -> ScriptedTurn:
        functions = offered_functions(body)
        shell = find_shell_tool(functions)
        if shell is None and asks_for_keystrokes(body):
            command = task.solution() if task is not None else None
            line = typed_line(command) if command is not None else None
            if line is None or terminal_shows_done(body):
                return ScriptedTurn(keystrokes_answer((), complete=True))
            if times_said(body, json.dumps(line)[1:-1]) == 0:
                return ScriptedTurn(keystrokes_answer((line,), complete=False))
            return ScriptedTurn(keystrokes_answer([""], complete=False, duration=WAIT_SECONDS))  # still running
        if shell is None and task is not None and task.patch.strip() and asks_for_edit_blocks(body):
            # an editor without tools: the patch as its SEARCH/REPLACE blocks. Aider drops the first answer's edits
            # to files not yet in its chat, adds them and asks again, so the blocks go out twice at most (its
            # prompt's few-shot examples are assistant turns too: "said" means these very blocks)
            blocks = search_replace_blocks(task.patch)
            if times_said(body, blocks) >= 2:
                return ScriptedTurn(GOLD_DONE)
            return ScriptedTurn(blocks)
        # side requests (titles, summaries) offer no shell tool; calls of unbound sessions get no patch
        command = task.solution() if task is not None else None
        if shell is None or command is None or has_tool_result(body):
            return ScriptedTurn(GOLD_DONE)
        return ScriptedTurn("", ((shell, shell_arguments(functions[shell], command)),))


class NoopPolicy:
    name = "noop"

    def next_turn(self, body: Mapping[str, Any], task: Task | None) -> ScriptedTurn:
        if asks_for_keystrokes(body):
            return ScriptedTurn(keystrokes_answer((), complete=True))
        return ScriptedTurn(NOOP_DONE)


POLICIES: dict[str, Policy] = {"gold": GoldPolicy(), "noop": NoopPolicy()}


def arguments_json(arguments: Mapping[str, Any]) -> str:
    """Tool-call arguments as the JSON string servers send (json.dumps spacing, as chat templates' tojson)."""
    return json.dumps(arguments, ensure_ascii=False)


def turn_message(turn: ScriptedTurn, call_ids: Sequence[str]) -> dict[str, Any]:
    """The turn as an OpenAI chat assistant message."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.reasoning:
        message["reasoning_content"] = turn.reasoning
    if turn.tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments_json(args)}}
            for call_id, (name, args) in zip(call_ids, turn.tool_calls, strict=True)
        ]
    return message


def search_replace_blocks(patch: str) -> str:
    """The patch as Aider's SEARCH/REPLACE blocks: one per hunk, the old lines (context and removed) searched, the new
    lines (context and added) put in their place; a new file searches nothing. Deleted files are not expressible."""
    blocks = []
    for diff in split_patch(patch)[1]:
        path = diff.change.new or diff.change.old
        for hunk in hunks(diff.text):
            old = [line[1:] for line in hunk.lines if line[:1] in (" ", "-")]
            new = [line[1:] for line in hunk.lines if line[:1] in (" ", "+")]
            search = "".join(f"{line}\n" for line in old)
            replace = "".join(f"{line}\n" for line in new)
            blocks.append(f"{path}\n```\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n```\n")
    return "\n".join(blocks)

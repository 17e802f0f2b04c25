"""Gold and noop through a terminal agent (Terminus-2): its own prompt template and its own JSON parser (both from the
`harbor` package Terminus-2 ships in, loaded by file: the package's __init__ wants Python 3.12), and the typed line
run by a real bash. What this cannot show: tmux's line editing, which the harness integration tests meet."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import harbor
import pytest

from polar_cli.inference.gold import (
    TYPED_DONE,
    WAIT_SECONDS,
    GoldPolicy,
    NoopPolicy,
    Task,
    apply_patch_command,
    asks_for_keystrokes,
)

TERMINUS = Path(harbor.__file__).parent / "agents" / "terminus_2"
PATCH = """diff --git a/app.py b/app.py
--- a/app.py
+++ b/app.py
@@ -1,2 +1,2 @@
 def answer():
-\treturn 41
+\treturn 42 if "$(true)" else `false`
"""


def parser() -> Any:
    spec = importlib.util.spec_from_file_location(
        "terminus_json_plain_parser", TERMINUS / "terminus_json_plain_parser.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert isinstance(module, ModuleType)
    return module.TerminusJSONPlainParser()


def first_body(instruction: str = "Fix answer() in app.py.") -> dict[str, Any]:
    """Terminus-2's first call as the gateway hands it on: its template, formatted as it formats it, as a user turn."""
    prompt = (TERMINUS / "templates" / "terminus-json-plain.txt").read_text()
    text = prompt.format(instruction=instruction, terminal_state="root@box:/testbed# ")
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


def then(body: dict[str, Any], answer: str, screen: str) -> dict[str, Any]:
    messages = [*body["messages"], {"role": "assistant", "content": answer}, {"role": "user", "content": screen}]
    return {**body, "messages": messages}


def test_terminus_2s_prompt_is_recognised_and_a_tool_call_request_is_not() -> None:
    assert asks_for_keystrokes(first_body())
    assert not asks_for_keystrokes({**first_body(), "tools": [{"type": "function", "function": {"name": "bash"}}]})
    assert not asks_for_keystrokes({"messages": [{"role": "user", "content": "Fix answer() in app.py."}]})


def test_gold_types_the_fix_waits_for_it_then_completes_twice(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("def answer():\n\treturn 41\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    task = Task("i", PATCH, str(repo))
    terminus = parser()

    body = first_body()
    first = GoldPolicy().next_turn(body, task)
    parsed = terminus.parse_response(first.content)
    assert parsed.error == "" and parsed.is_task_complete is False and len(parsed.commands) == 1
    keystrokes = parsed.commands[0].keystrokes
    # one line, nothing a line editor acts on (the patch has a tab, `$(` and a backquote)
    assert keystrokes.endswith("\n") and keystrokes.count("\n") == 1 and "\t" not in keystrokes
    assert "`" not in keystrokes and "$(" not in keystrokes
    ran = subprocess.run(["bash", "-c", keystrokes], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert (repo / "app.py").read_text() == 'def answer():\n\treturn 42 if "$(true)" else `false`\n'
    assert f"{TYPED_DONE}=0" in ran.stdout

    # the terminal echoes the line but has not printed its status yet: wait, as the prompt says, typing nothing
    waiting = then(body, first.content, f"root@box:/testbed# {keystrokes}")
    wait = terminus.parse_response(GoldPolicy().next_turn(waiting, task).content)
    assert wait.is_task_complete is False and [(c.keystrokes, c.duration) for c in wait.commands] == [
        ("", WAIT_SECONDS)
    ]

    done = then(waiting, GoldPolicy().next_turn(waiting, task).content, ran.stdout)
    complete = terminus.parse_response(GoldPolicy().next_turn(done, task).content)
    assert complete.is_task_complete is True and complete.commands == [] and complete.error == ""
    confirm = then(
        done, GoldPolicy().next_turn(done, task).content, "Are you sure you want to mark the task as complete?"
    )
    assert terminus.parse_response(GoldPolicy().next_turn(confirm, task).content).is_task_complete is True


def test_a_harbor_oracle_is_typed_the_same_way(tmp_path: Path) -> None:
    task = Task("t", "", str(tmp_path), command=f"cd {tmp_path} && printf 'solved\\n' > out.txt")
    line = parser().parse_response(GoldPolicy().next_turn(first_body(), task).content).commands[0].keystrokes
    subprocess.run(["bash", "-c", line], check=True, capture_output=True)
    assert (tmp_path / "out.txt").read_text() == "solved\n"


@pytest.mark.parametrize("task", [None, Task("i", "  ")])
def test_without_a_solution_gold_completes_at_once(task: Task | None) -> None:
    parsed = parser().parse_response(GoldPolicy().next_turn(first_body(), task).content)
    assert parsed.is_task_complete is True and parsed.commands == []


def test_noop_completes_at_once_in_the_harness_s_format_and_types_nothing() -> None:
    parsed = parser().parse_response(NoopPolicy().next_turn(first_body(), Task("i", PATCH)).content)
    assert parsed.error == "" and parsed.is_task_complete is True and parsed.commands == []


def test_a_typed_line_is_valid_json_in_the_answer() -> None:
    answer = json.loads(GoldPolicy().next_turn(first_body(), Task("i", PATCH)).content)
    line = answer["commands"][0]["keystrokes"]
    assert apply_patch_command(PATCH, "/testbed") not in line  # encoded, never in the clear

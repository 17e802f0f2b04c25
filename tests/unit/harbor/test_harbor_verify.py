"""The verifier's reward as Harbor reads it, the oracle command, and the gold policy running it."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from polar_cli.harbor.tasks import load_task
from polar_cli.harbor.verify import RewardError, main_reward, oracle_command, parse_rewards, write_files_command
from polar_cli.inference.gold import GoldPolicy, NoopPolicy, Task

ROOT = Path(__file__).resolve().parents[3]


def test_reward_txt_is_one_value_named_reward() -> None:
    assert parse_rewards(None, b"1\n") == {"reward": 1.0}
    assert parse_rewards(None, b" 0.25 ") == {"reward": 0.25}


def test_reward_json_names_several_values_and_wins_over_reward_txt() -> None:
    named = {"reward": 0.0, "requests": 1, "errors": 0.5}
    assert parse_rewards(json.dumps(named).encode(), b"1") == {"reward": 0.0, "requests": 1.0, "errors": 0.5}
    assert parse_rewards(b"0.75", None) == {"reward": 0.75}


@pytest.mark.parametrize(
    ("json_text", "txt", "message"),
    [
        (None, None, "no reward file"),
        (None, b"", "not a number"),
        (None, b"yes", "not a number"),
        (b"{", None, "not JSON"),
        (b"{}", None, "names no value"),
        (b'{"reward": "1"}', None, "not a finite number"),
        (b'{"reward": true}', None, "not a finite number"),
        (b'{"reward": NaN}', None, "not a finite number"),
        (None, b"inf", "not a finite number"),
    ],
)
def test_a_missing_or_bad_reward_is_an_error_never_a_zero(
    json_text: bytes | None, txt: bytes | None, message: str
) -> None:
    with pytest.raises(RewardError, match=message):
        parse_rewards(json_text, txt)


def test_the_compared_reward_is_the_one_named_reward_else_the_mean() -> None:
    assert main_reward({"reward": 0.0, "a": 1.0}) == 0.0
    assert math.isclose(main_reward({"a": 1.0, "b": 0.5}), 0.75)


def test_written_files_arrive_byte_for_byte(tmp_path: Path) -> None:
    files = {
        str(tmp_path / "s" / "solve.sh"): b"#!/bin/bash\necho $(date) `id` 'q' \"d\"\n",
        str(tmp_path / "s" / "deep dir" / "data.bin"): bytes(range(256)),
        str(tmp_path / "s" / "no-newline.txt"): b"last line",
        str(tmp_path / "s" / "EOF"): b"EOF\nPOLAR\n",
    }
    subprocess.run(["bash", "-c", write_files_command(files)], check=True)
    for path, data in files.items():
        assert Path(path).read_bytes() == data


def test_the_oracle_command_copies_solution_and_runs_solve_sh_in_the_workdir() -> None:
    task = load_task(ROOT / "recipes" / "demo-terminal" / "fix-backup")
    command = oracle_command(task)
    assert "/solution/solve.sh" in command and command.endswith("cd /app && bash /solution/solve.sh")
    assert set(task.solution_files()) == {"/solution/solve.sh"}


TOOLS = [
    {"type": "function", "function": {"name": "bash", "parameters": {"properties": {"command": {"type": "string"}}}}}
]


def test_gold_runs_a_harbor_tasks_oracle_once_with_the_shell_tool() -> None:
    task = Task("fix-backup", "", "/app", command="bash /solution/solve.sh")
    body = {"messages": [{"role": "user", "content": "fix it"}], "tools": TOOLS}
    turn = GoldPolicy().next_turn(body, task)
    assert turn.tool_calls == (("bash", {"command": "bash /solution/solve.sh"}),)
    done = {"messages": [*body["messages"], {"role": "tool", "content": "ok"}], "tools": TOOLS}
    assert GoldPolicy().next_turn(done, task).tool_calls == ()
    assert NoopPolicy().next_turn(body, task).tool_calls == ()
    # a task with neither patch nor oracle: gold says it is done and does nothing
    assert GoldPolicy().next_turn(body, Task("t", "", "/app")).tool_calls == ()

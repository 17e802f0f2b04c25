"""History and network lookups in the commands an agent ran, as each harness records its tool calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import CaptureRecord
from polar_cli.generate.lookups import COMMAND_CHARS, MAX_LOOKUPS, call_lookups, command_lookups, find_lookups
from polar_cli.generate.rows import build_row
from polar_cli.generate.state import STATE, state_entry
from polar_cli.generate.summary import render_summary, summarize
from tests.unit.generate.test_generate_rows import facts, record

BASE = "713db7cb402cbec9ed7d3d5577060fe4d12d1d0e"


def answer(seq: int, *calls: tuple[str, dict[str, Any]]) -> CaptureRecord:
    """A call whose answer made these tool calls (the gateway's OpenAI chat form, arguments as a JSON string)."""
    tool_calls = [
        {"id": f"call_{seq}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(calls)
    ]
    message = {"role": "assistant", "content": "", "tool_calls": tool_calls}
    return CaptureRecord(
        session_id="s",
        seq=seq,
        api="openai_chat",
        path="/v1/chat/completions",
        started=0.0,
        ended=1.0,
        status="ok",
        request={},
        response={"choices": [{"message": message, "finish_reason": "tool_calls"}]},
    )


# one real-looking call per harness: Claude Code's Bash, Codex's exec_command and its older shell (an argv), Qwen
# Code's and Gemini CLI's run_shell_command, Pi's bash, Codex typing into a running shell
@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("Bash", {"command": "cd /testbed && git log --all --oneline | head -20", "description": "History"},
         [("history", "git log --all")]),
        ("exec_command", {"cmd": "git show 4f2c9e1d:astropy/io/fits/card.py", "workdir": "/testbed"},
         [("history", "git show 4f2c9e1d:astropy/io/fits/card.py")]),
        ("shell", {"command": ["bash", "-lc", "git reflog | head"], "workdir": "/testbed"},
         [("history", "git reflog")]),
        ("shell", {"command": ["git", "fetch", "origin", "main"]}, [("network", "git fetch")]),
        ("run_shell_command", {"command": "git fsck --lost-found", "description": "Find dangling commits"},
         [("history", "git fsck")]),
        ("run_shell_command", {"command": "curl -sL https://github.com/astropy/astropy/pull/12345.diff"},
         [("network", "curl")]),
        ("bash", {"command": "git stash list && git stash show -p stash@{0}"}, [("history", "git stash list")]),
        ("bash", {"command": "pip download astropy==5.1 --no-deps -d /tmp/x"}, [("network", "pip download")]),
        ("write_stdin", {"session_id": 3, "chars": "git log --remotes --oneline\n"},
         [("history", "git log --remotes")]),
        ("Bash", {"command": "git checkout origin/main -- astropy/units/core.py"},
         [("history", "git checkout origin/main")]),
        ("Bash", {"command": "wget -qO- https://raw.githubusercontent.com/org/repo/main/a.py && git diff v5.0.1"},
         [("history", "git diff v5.0.1"), ("network", "wget")]),
        ("Bash", {"command": "gh pr view 123 --repo org/repo"}, [("network", "gh")]),
        ("Bash", {"command": "python -c \"import urllib.request as u; u.urlopen('https://gitlab.com/x/y')\""},
         [("network", "url gitlab.com")]),
        ("Bash", {"command": "timeout 30 git -C /testbed --no-pager log --tags --simplify-by-decoration"},
         [("history", "git log --tags")]),
        ("Bash", {"command": "sh -c 'git branch -a'"}, [("history", "git branch -a")]),
    ],
)  # fmt: skip
def test_lookups_per_harness(name: str, args: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    found = call_lookups(name, json.dumps(args), BASE)
    assert [(f["kind"], f["rule"]) for f in found] == expected


@pytest.mark.parametrize(
    "command",
    [
        "git log -5",
        "git log --oneline -n 20 -- astropy/io",
        "git diff",
        "git diff HEAD -- a.py",
        "git status",
        "git show HEAD",
        "git show HEAD~2:setup.py",
        f"git show {BASE[:10]}",
        f"git diff {BASE}..HEAD",
        "git checkout -- a.py",
        "git checkout -b my-fix",
        "git stash && python -m pytest tests/test_a.py; git stash pop",
        "git blame a.py",
        "git log -S addition_of_thing --oneline",
        "git tag -d scratch",
        "curl --version",
        "curl -s http://localhost:8000/health",
        "pip install -e . && pip list",
        "grep -rn 'github.com' setup.cfg",  # a code host named in a pattern, not fetched
        "cat > /tmp/repro.py << 'EOF'\nimport requests\nrequests.get('https://github.com')\nEOF\npython /tmp/repro.py",
        "echo 'the fix is in git log --all' # comment: curl https://github.com",
    ],
)
def test_ordinary_commands_are_not_lookups(command: str) -> None:
    assert command_lookups(command, BASE) == [], command


def test_a_commit_id_other_than_the_base_is_a_lookup_and_the_base_is_not() -> None:
    assert command_lookups("git show deadbeef1", BASE) == [("history", "git show deadbeef1")]
    assert command_lookups(f"git show {BASE[:7]}", BASE) == []
    assert command_lookups("git diff HEAD@{1}", BASE) == [("history", "git diff HEAD@{1}")]
    assert command_lookups("git log ORIG_HEAD", BASE) == [("history", "git log ORIG_HEAD")]
    assert command_lookups("git log HEAD..upstream/main", BASE) == [("history", "git log HEAD..upstream/main")]
    assert command_lookups("git rev-parse origin/main", BASE) == [("history", "git rev-parse origin/main")]


def test_web_tools_are_network_lookups() -> None:
    found = call_lookups("WebFetch", json.dumps({"url": "https://github.com/org/repo/pull/1", "prompt": "the diff"}))
    assert found[0]["kind"] == "network" and found[0]["rule"] == "WebFetch"
    assert "github.com/org/repo/pull/1" in found[0]["command"]
    assert call_lookups("google_web_search", json.dumps({"query": "astropy fix"}))[0]["kind"] == "network"
    assert call_lookups("read_file", json.dumps({"absolute_path": "/testbed/a.py"})) == []
    assert call_lookups("Bash", "{not json") == []


def test_the_session_lookups_are_in_call_order_deduplicated_and_bounded() -> None:
    records = [
        answer(1, ("Bash", {"command": "git status"}), ("Bash", {"command": "git log --all"})),
        answer(0, ("Bash", {"command": "git fetch"})),
        answer(2, ("Bash", {"command": "git log --all"})),
        answer(3, *[("Bash", {"command": f"git show {i:07x}abc " + "x" * 900}) for i in range(40)]),
    ]
    found = find_lookups(records, BASE)
    assert [f["command"] for f in found[:2]] == ["git fetch", "git log --all"]
    assert len(found) == MAX_LOOKUPS
    assert all(len(f["command"]) <= COMMAND_CHARS for f in found) and found[-1]["command"].endswith("...")


def test_the_row_carries_lookups_and_the_state_line_their_kinds() -> None:
    records = [record(0), answer(1, ("Bash", {"command": "git log --all"}), ("Bash", {"command": "curl x.org"}))]
    _, row = build_row(facts(records=records), {})
    assert row["lookups"] == [
        {"kind": "history", "rule": "git log --all", "command": "git log --all"},
        {"kind": "network", "rule": "curl", "command": "curl x.org"},
    ]
    assert state_entry(row, 1, 0.0)["lookups"] == ["history", "network"]
    _, clean = build_row(facts(), {})
    assert clean["lookups"] == [] and state_entry(clean, 1, 0.0)["lookups"] == []


def test_the_summary_counts_the_sessions_with_lookups(tmp_path: Path) -> None:
    kinds = [["history"], ["history", "network"], [], None]  # None: a state line written before lookups were kept
    entries: list[dict[str, Any]] = [{"type": "segment", "segment": 1, "t": 0.0}]
    for i, found in enumerate(kinds):
        entries.append({
            "type": "session", "key": f"k{i}", "segment": 1, "t": 10.0, "instance_id": f"i{i}", "repo": "a/x",
            "harness": "pi", "attempt": 1, "accepted": i == 1, "status": "OK", "reason": None, "calls": 1,
            "timing": {}, **({"lookups": found} if found is not None else {}),
        })  # fmt: skip
    (tmp_path / STATE).write_text("".join(json.dumps(e) + "\n" for e in entries))
    summary = summarize(tmp_path, gpus=1, planned=4, engine="gold", model="q", segment=1)
    assert summary["lookups"] == {"sessions": 2, "accepted": 1, "history": 2, "network": 1}
    render_summary(summary)

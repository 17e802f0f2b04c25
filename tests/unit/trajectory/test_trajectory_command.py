from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import datasets
import orjson
import pytest
from trajectory_helpers import A, E, T, call, failed, mask_of
from typer.testing import CliRunner

from polar_cli import cli
from polar_cli.capture import CaptureRecord, CaptureWriter
from polar_cli.trajectory.stats import SplitKind

app = cli.build_app()
runner = CliRunner()

TOOLS = [
    {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"cmd": {}}}}},
    {"type": "function", "function": {"name": "edit", "parameters": {"type": "object", "required": ["path"]}}},
]


def kinds(**counts: int) -> dict[str, int]:
    """Splits by kind as the builder reports them: every kind, 0 where none."""
    return {kind: counts.get(kind, 0) for kind in get_args(SplitKind)}


def _session(session: str) -> list[CaptureRecord]:
    """sys+user -> tool call -> tool result -> final answer, plus a failed call and a side request."""
    p0 = [10, 11, A]
    p1 = [*p0, 20, E, T, 30, E, A]
    tool_call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
    m0: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "list files"}]
    m1 = [*m0, {"role": "assistant", "content": None, "tool_calls": [tool_call]}]
    m1.append({"role": "tool", "tool_call_id": "c1", "content": "a.py"})
    reply0 = {"role": "assistant", "content": None, "reasoning_content": "use ls", "tool_calls": [tool_call]}
    return [
        call(0, p0, [20, E], finish="tool_calls", messages=m0, tools=TOOLS, reply=reply0, session=session),
        failed(1, session=session),
        call(2, [90, A], [91, E], session=session, messages=[{"role": "user", "content": "title?"}]),
        call(3, p1, [21, 22, E], messages=m1, tools=TOOLS, reply={"content": "a.py"}, session=session),
    ]


@pytest.fixture
def capture_dir(tmp_path: Path) -> Path:
    d = tmp_path / "capture"
    writer = CaptureWriter(d)
    for s in ("sess-a", "sess-b"):
        for r in _session(s):
            writer.write(r)
    writer.close()
    return d


def _load(path: Path, cache: Path) -> list[dict[str, Any]]:
    kind = "json" if path.suffix == ".jsonl" else "parquet"
    ds = datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(cache))
    return [dict(row) for row in ds]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_merge_traces_output_loads_with_datasets(capture_dir: Path, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"traces{suffix}"
    result = runner.invoke(app, ["merge-traces", str(capture_dir), "--strategy", "prefix_merging", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "completions_merged" in result.output
    rows = _load(out, tmp_path / "cache")
    assert [(r["session_id"], r["seqs"]) for r in rows] == [
        ("sess-a", [0, 3]),
        ("sess-a", [2]),
        ("sess-b", [0, 3]),
        ("sess-b", [2]),
    ]
    main = rows[0]
    ids, mask, logprobs = mask_of([([20, E], 1), ([T, 30, E, A], 0), ([21, 22, E], 1)])
    assert main["prompt_ids"] == [10, 11, A]
    assert main["response_ids"] == ids
    assert main["loss_mask"] == mask
    assert main["response_logprobs"] == pytest.approx(logprobs)
    assert main["finish_reason"] == "stop"
    assert [m["role"] for m in main["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert main["messages"][2]["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"cmd": "ls"}'}
    assert main["messages"][3]["tool_call_id"] == "c1"
    assert main["messages"][4]["content"] == "a.py"
    assert orjson.loads(main["tools"]) == TOOLS
    assert main["metadata"]["turns"] == [[0, 0, 2], [3, 6, 9]]
    assert main["metadata"]["end"] == "full"
    assert rows[1]["metadata"]["start"] == "unrelated"
    assert not list(tmp_path.glob(".traces*"))  # no temporary file left behind


def test_json_output_reports_stats_and_splits(capture_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    args = ["merge-traces", str(capture_dir), "--strategy", "prefix_merging", "--out", str(out), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert report["rows"] == 4
    assert report["eot_token_id"] == E
    assert report["sessions"] == 2
    assert (report["chains_total"], report["chains_full"], report["chains_truncated"]) == (4, 4, 0)
    assert (report["completions_total"], report["completions_merged"], report["completions_skipped"]) == (6, 2, 2)
    assert report["split_counts"] == kinds(unrelated=2)
    assert report["splits"][0]["seq"] == 2
    assert report["skip_counts"] == {"status upstream_error": 2}
    # the two unrelated calls open conversations of their own: each session's one call that could merge did
    assert (report["drift"], report["conversations"], report["merge_rate"]) == ("tolerant", 4, 1.0)
    assert (report["turns_drifted"], report["drift_tokens"]) == (0, 0)
    assert [s["session_id"] for s in report["per_session"]] == ["sess-a", "sess-b"]
    assert report["per_session"][0] == {
        "session_id": "sess-a", "chains_total": 2, "chains_full": 2, "chains_truncated": 0, "completions_total": 3,
        "completions_merged": 1, "completions_skipped": 1, "conversations": 2, "turns_drifted": 0, "drift_tokens": 0,
        "compactions": 0, "subagents": 0,
        "merge_rate": 1.0, "split_counts": kinds(unrelated=1), "skip_counts": {"status upstream_error": 1},
    }  # fmt: skip


def _drifting_capture(d: Path) -> None:
    """Session "drift": call 1 renders call 0's answer [20 21 22] as [20 90 91]; session "exact" renders it exactly."""
    writer = CaptureWriter(d)
    for sid, rendered in (("drift", [20, 90, 91]), ("exact", [20, 21, 22])):
        p0 = [10, 11, A]
        p1 = [*p0, *rendered, E, T, 30, E, A]
        p2 = [*p1, 23, E, T, 31, E, A]
        for seq, (prompt, sampled) in enumerate([(p0, [20, 21, 22, E]), (p1, [23, E]), (p2, [24, E])]):
            writer.write(call(seq, prompt, sampled, session=sid))
    writer.close()


@pytest.mark.parametrize(
    ("policy", "seqs", "merged", "drift_tokens", "splits"),
    [
        ("tolerant", [("drift", [0, 1, 2]), ("exact", [0, 1, 2])], 4, 2, {}),
        ("strict", [("drift", [0]), ("drift", [1, 2]), ("exact", [0, 1, 2])], 3, 0, {"drift": 1}),
    ],
)
def test_drift_policy(
    tmp_path: Path, policy: str, seqs: list[Any], merged: int, drift_tokens: int, splits: dict[str, int]
) -> None:
    d = tmp_path / "capture"
    _drifting_capture(d)
    out = tmp_path / "t.jsonl"
    args = ["merge-traces", str(d), "--strategy", "prefix_merging", "--out", str(out), "--drift", policy, "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [(r["session_id"], r["seqs"]) for r in rows] == seqs
    assert (report["drift"], report["completions_merged"], report["drift_tokens"]) == (policy, merged, drift_tokens)
    assert report["split_counts"] == kinds(**splits)
    assert rows[0]["metadata"]["drift_tokens"] == drift_tokens
    by_session = {s["session_id"]: s for s in report["per_session"]}
    assert by_session["drift"]["merge_rate"] == (1.0 if policy == "tolerant" else 0.5)
    assert by_session["exact"]["merge_rate"] == 1.0
    table = runner.invoke(app, args[:-1])
    assert table.exit_code == 0, table.output
    assert f"drift {policy}" in table.output and "merge_rate" in table.output and "drift_tokens" in table.output


def test_per_request_writes_one_row_per_trainable_call(capture_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    args = ["merge-traces", str(capture_dir), "--strategy", "per_request", "--out", str(out), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = _load(out, tmp_path / "cache")
    assert [r["seqs"] for r in rows] == [[0], [2], [3]] * 2
    assert rows[2]["response_ids"] == [21, 22, E] and rows[2]["loss_mask"] == [1, 1, 1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "prefix_merging", "--out", "OUT/t.csv"], "must end in .jsonl or .parquet"),
        (["--strategy", "prefix_merging", "--out", "OUT/missing/t.jsonl"], "does not exist"),
        (["--strategy", "sideways", "--out", "OUT/t.jsonl"], "sideways"),
        (["--strategy", "prefix_merging", "--out", "OUT/t.jsonl", "--eot-token-id", "-1"], "not negative"),
        (["--strategy", "prefix_merging", "--out", "OUT/t.jsonl", "--drift", "lenient"], "lenient"),
    ],
)
def test_bad_usage_exits_2(capture_dir: Path, tmp_path: Path, args: list[str], message: str) -> None:
    args = [a.replace("OUT", str(tmp_path)) for a in args]
    result = runner.invoke(app, ["merge-traces", str(capture_dir), *args])
    assert result.exit_code == 2
    assert message in result.output


def test_capture_dir_without_sessions_exits_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    args = ["merge-traces", str(tmp_path / "empty"), "--strategy", "per_request", "--out", str(tmp_path / "t.jsonl")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "no session files" in result.output
    result = runner.invoke(app, [*args[:1], str(tmp_path / "nope"), *args[2:]])
    assert result.exit_code == 2
    assert "not a directory" in result.output


def test_undetectable_end_of_turn_asks_for_the_flag(tmp_path: Path) -> None:
    d = tmp_path / "capture"
    writer = CaptureWriter(d)
    writer.write(call(0, [10, A], [20, 21], finish="length"))
    writer.close()
    args = ["merge-traces", str(d), "--strategy", "prefix_merging", "--out", str(tmp_path / "t.jsonl")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "--eot-token-id" in result.output
    result = runner.invoke(app, [*args, "--eot-token-id", str(E)])
    assert result.exit_code == 0, result.output


def test_no_trainable_call_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    d = tmp_path / "capture"
    writer = CaptureWriter(d)
    writer.write(failed(0))
    writer.close()
    out = tmp_path / "t.parquet"
    result = runner.invoke(app, ["merge-traces", str(d), "--strategy", "prefix_merging", "--out", str(out)])
    assert result.exit_code == 1
    assert "no trainable calls" in result.output
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [d]


def test_unreadable_capture_file_exits_1(tmp_path: Path) -> None:
    d = tmp_path / "capture"
    d.mkdir()
    (d / "s.jsonl").write_bytes(b'{"v": 99}\n')
    args = ["merge-traces", str(d), "--strategy", "per_request", "--out", str(tmp_path / "t.jsonl")]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert "unreadable capture file" in result.output

"""The run directory's protocol: row before state line, torn lines cut, the row written just before a kill adopted;
and a writer killed with SIGKILL again and again, at random moments, ends with every row exactly once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polar_cli.config import parse_recipe
from polar_cli.errors import ConfigError
from polar_cli.generate.state import CORPUS, REJECTS, STATE, RunState, Verdict, last_row, segments

WRITER = Path(__file__).with_name("state_writer.py")
RECIPE = {"manifest": {"source": "m.jsonl"}, "harnesses": ["pi"], "engine": {"kind": "gold", "tokenizer": "qwen3"}}
sys.path.insert(0, str(WRITER.parent))
from state_writer import row  # noqa: E402


def lines(path: Path) -> list[bytes]:
    """Complete lines only (what a reader may rely on)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].splitlines(keepends=True)


def whole_sessions(rows: list[bytes]) -> list[bytes]:
    """The rows less a trailing session whose rows a kill tore (Rule 4 cuts those when the run is opened)."""
    while rows:
        last = json.loads(rows[-1])
        if last["trace_index"] == last["trace_count"] - 1:
            break
        rows = rows[: -1 - last["trace_index"]]
    return rows


def state_keys(out: Path) -> list[str]:
    return [json.loads(x)["key"] for x in lines(out / STATE) if json.loads(x).get("type") == "session"]


def test_row_then_state_line_and_errors_are_not_finished(tmp_path: Path) -> None:
    state = RunState(tmp_path, parse_recipe(RECIPE))
    state.record(Verdict("accepted", row(1)))
    state.record(Verdict("rejected", row(3)))
    state.record(Verdict("error", {**row(5), "status": "INIT_ERROR"}))
    state.close()
    assert [json.loads(x)["key"] for x in lines(tmp_path / CORPUS)] == ["inst-1::pi::1"] * 2  # its two traces
    assert [json.loads(x)["key"] for x in lines(tmp_path / REJECTS)] == ["inst-3::pi::1"]
    assert state_keys(tmp_path) == ["inst-1::pi::1", "inst-3::pi::1"]  # the error is retried next time
    again = RunState(tmp_path, parse_recipe(RECIPE))
    assert set(again.finished) == {"inst-1::pi::1", "inst-3::pi::1"} and again.segment == 2
    again.close()


def test_a_row_without_its_state_line_is_adopted_and_a_torn_row_cut(tmp_path: Path) -> None:
    state = RunState(tmp_path, parse_recipe(RECIPE))
    state.record(Verdict("accepted", row(1)))
    state.close()
    # a kill between a row and its state line (Rule 3), then a kill in the middle of the next row (Rule 2)
    with (tmp_path / CORPUS).open("ab") as fh:
        fh.write(json.dumps({**row(2), "finished_at": 1.0}).encode() + b"\n")
        fh.write(json.dumps(row(4)).encode()[:5000])
    with (tmp_path / STATE).open("ab") as fh:
        fh.write(b'{"type":"session","key":"inst-9')  # a torn state line
    state = RunState(tmp_path, parse_recipe(RECIPE))
    assert state.recovered == 1
    assert set(state.finished) == {"inst-1::pi::1", "inst-2::pi::1"}
    state.close()
    assert [json.loads(x)["key"] for x in lines(tmp_path / CORPUS)] == ["inst-1::pi::1"] * 2 + ["inst-2::pi::1"]
    assert (tmp_path / CORPUS).read_bytes().endswith(b"\n")
    assert last_row(tmp_path / CORPUS)["key"] == "inst-2::pi::1"  # type: ignore[index]


def test_a_session_whose_rows_a_kill_tore_is_cut_whole_and_runs_again(tmp_path: Path) -> None:
    """Rule 4: two of a session's three rows made it to disk; its first rows are cut with the torn one."""
    state = RunState(tmp_path, parse_recipe(RECIPE))
    state.record(Verdict("accepted", row(1)))  # 2 traces: 2 rows
    state.close()
    whole = (tmp_path / CORPUS).read_bytes()
    state = RunState(tmp_path, parse_recipe(RECIPE))
    state.record(Verdict("accepted", row(5)))  # 3 traces
    state.close()
    torn = (tmp_path / CORPUS).read_bytes()
    cut = len(whole) + sum(len(x) + 1 for x in torn[len(whole) :].split(b"\n")[:2]) + 100
    (tmp_path / CORPUS).write_bytes(torn[:cut])
    (tmp_path / STATE).write_bytes(b"".join(x for x in lines(tmp_path / STATE) if b"inst-5" not in x))
    state = RunState(tmp_path, parse_recipe(RECIPE))
    assert state.recovered == 0 and set(state.finished) == {"inst-1::pi::1"}
    state.close()
    assert (tmp_path / CORPUS).read_bytes() == whole


def test_resuming_with_another_engine_is_refused(tmp_path: Path) -> None:
    RunState(tmp_path, parse_recipe(RECIPE)).close()
    with pytest.raises(ConfigError, match=r"policy: 'gold' -> 'noop'"):
        RunState(tmp_path, parse_recipe(RECIPE, ["engine.kind=noop"]))
    # anything that does not change what the corpus is may change
    RunState(tmp_path, parse_recipe(RECIPE, ["concurrency.run=9", "attempts=3"])).close()


def test_resuming_with_another_served_model_is_refused(tmp_path: Path) -> None:
    served = parse_recipe(RECIPE, ["engine.kind=vllm", "engine.url=http://gpu:8000"])
    state = RunState(tmp_path, served)
    state.check_model("qwen3.5-122b")
    state.close()
    # launching the server instead of using a running one is fine: the rows come from the same model
    relaunched = parse_recipe(RECIPE, ["engine.kind=sglang", "engine.sglang.model_path=/m"])
    state = RunState(tmp_path, relaunched)
    state.check_model("qwen3.5-122b")
    with pytest.raises(ConfigError, match=r"holds rows of model 'qwen3.5-122b', but the engine serves 'other'"):
        state.check_model("other")
    state.close()


def test_segments_measure_each_run_even_a_killed_one(tmp_path: Path) -> None:
    (tmp_path / STATE).write_text(
        "\n".join(
            json.dumps(e)
            for e in (
                {"type": "segment", "segment": 1, "t": 100.0},
                {"type": "session", "key": "a", "segment": 1, "t": 130.0},  # killed after this one
                {"type": "segment", "segment": 2, "t": 500.0},
                {"type": "session", "key": "b", "segment": 2, "t": 520.0},
                {"type": "segment_end", "segment": 2, "t": 560.0},
            )
        )
        + "\n"
    )
    assert list(segments(tmp_path)) == [(1, 100.0, 130.0), (2, 500.0, 560.0)]


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    n = 150
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": str(WRITER.parents[3])}
    kept: dict[str, list[bytes]] = {CORPUS: [], REJECTS: []}
    kills = 0
    for _attempt in range(40):
        argv = [sys.executable, str(WRITER), str(tmp_path), str(n), "0.002"]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.25))
        if proc.poll() is not None:
            assert proc.returncode == 0
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        for name in kept:
            now = whole_sessions(lines(tmp_path / name))
            # Rules 2-4: every row of a whole session seen after an earlier kill is still there, in place
            assert now[: len(kept[name])] == kept[name]
            kept[name] = now
    else:
        pytest.fail("the writer never finished")
    assert kills >= 3, "the writer finished too fast to be killed: make its rows bigger"
    rows = [json.loads(x) for name in (CORPUS, REJECTS) for x in lines(tmp_path / name)]
    # every row exactly once: each session's traces, each once
    assert sorted((r["key"], r["trace_index"]) for r in rows) == sorted(
        (f"inst-{i}::pi::1", t) for i in range(n) for t in range(1 + i % 3)
    )
    assert all(r["trace_count"] == 1 + int(r["instance_id"].split("-")[1]) % 3 for r in rows)
    keys = sorted({r["key"] for r in rows})
    assert sorted(state_keys(tmp_path)) == sorted(keys)
    for name in kept:
        assert lines(tmp_path / name)[: len(kept[name])] == kept[name]
    assert all(r["accepted"] == (int(r["instance_id"].split("-")[1]) % 3 != 0) for r in rows)

"""`polar export atif RUN_DIR` on a run directory: one valid ATIF file per traced session, and an index."""

from __future__ import annotations

from pathlib import Path

import orjson
from harbor.models.trajectories import Trajectory
from typer.testing import CliRunner

from polar_cli import cli
from tests.support.session_rows import session_rows, traceless_rows


def write_run(run_dir: Path) -> None:
    run_dir.mkdir()
    corpus = [*session_rows(session_id="sess-a"), *traceless_rows("sess-empty"), *session_rows(session_id="sess-b")]
    rejected = [{**r, "accepted": False, "status": "unresolved", "reward": 0.0} for r in session_rows(session_id="r/1")]
    for name, rows in (("corpus.jsonl", corpus), ("rejects.jsonl", rejected)):
        (run_dir / name).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.build_app(), ["export", "atif", *args])
    return result.exit_code, result.output


def index(out: Path) -> list[dict]:
    return [orjson.loads(line) for line in (out / "index.jsonl").read_bytes().splitlines()]


def test_export_writes_one_valid_file_per_traced_session_and_an_index(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_run(run_dir)
    code, output = invoke(str(run_dir))
    assert code == 0, output
    out = run_dir / "atif"
    assert "2 session(s)" in output and "1 no trace" in output
    entries = index(out)
    assert [(e["session_id"], e.get("file"), e.get("skipped")) for e in entries] == [
        ("sess-a", "sess-a.json", None),
        ("sess-empty", None, "no trace"),
        ("sess-b", "sess-b.json", None),
    ]
    assert sorted(p.name for p in out.iterdir()) == ["index.jsonl", "sess-a.json", "sess-b.json"]
    for entry in entries[::2]:
        parsed = Trajectory.model_validate_json((out / entry["file"]).read_bytes())
        assert parsed.session_id == entry["session_id"]
        assert entry["steps"] == len(parsed.steps) and entry["traces"] == 4
        assert entry["subagent_trajectories"] == len(parsed.subagent_trajectories or [])


def test_rejects_go_in_on_request_and_out_goes_where_asked(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_run(run_dir)
    out = tmp_path / "elsewhere"
    code, output = invoke(str(run_dir), "--out", str(out), "--include-rejects", "--no-prompt-ids")
    assert code == 0, output
    assert not (run_dir / "atif").exists()
    (rejected,) = [e for e in index(out) if e["source"] == "rejects.jsonl"]
    assert rejected["file"] == "r_1.json" and rejected["accepted"] is False
    parsed = Trajectory.model_validate_json((out / "r_1.json").read_bytes())
    assert parsed.extra is not None and parsed.extra["reward"] == 0.0
    assert all(s.metrics is None or s.metrics.prompt_token_ids is None for s in parsed.steps)


def test_a_directory_without_a_corpus_is_bad_usage(tmp_path: Path) -> None:
    code, output = invoke(str(tmp_path))
    assert code == 2
    assert "error:" in output and "corpus.jsonl" in output

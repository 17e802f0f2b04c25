"""The report's reading of a run directory: summary.json's numbers, sessions grouped by key, a run being written."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from polar_cli import cli
from polar_cli.report import build_report, figures, find_session, iter_sessions, session_summary
from tests.support.session_rows import session_rows
from tests.support.synth_run import write_run

SUMMARY_KEYS = ("attempts", "accepted", "rejected", "acceptance_rate", "errors_last_segment", "errors_retried",
                "by_harness", "by_repo", "by_status", "reject_reasons", "tokens", "model_calls", "lookups", "merge",
                "mean_stage_seconds", "planned", "pending", "wall_seconds")  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(tmp_path_factory.mktemp("run") / "run", 60, seed=3)


def test_figures_are_summary_json_s(run: Path) -> None:
    summary = orjson.loads((run / "summary.json").read_bytes())
    got = figures(run)
    assert {k: got[k] for k in SUMMARY_KEYS} == {k: summary[k] for k in SUMMARY_KEYS}
    assert got["live"] is False
    assert got["accepted"] > 0 and got["rejected"] > 0 and got["errors_last_segment"] > 0


def test_sessions_group_the_rows_of_one_session(run: Path) -> None:
    sessions = list(iter_sessions(run))
    state = [orjson.loads(line) for line in (run / "state.jsonl").read_bytes().splitlines()]
    finished = [e for e in state if e.get("type") == "session"]
    errors = (run / "errors.jsonl").read_bytes().count(b"\n")
    assert len(sessions) == len(finished) + errors
    assert len({s.page for s in sessions}) == len(sessions)
    for s in sessions:
        assert len({r["key"] for r in s.rows}) == 1
        if s.kind != "error":
            assert [r["trace_index"] for r in s.rows] == list(range(s.rows[0]["trace_count"]))
        summary = session_summary(s)
        assert summary["trainable_tokens"] == sum(sum(t["trace"]["loss_mask"]) for t in s.traces())


def test_a_run_being_written_is_read_up_to_its_torn_last_line(tmp_path: Path) -> None:
    run = write_run(tmp_path / "live", 12, seed=5, finish=False)
    whole = len(list(iter_sessions(run)))
    for name in ("corpus.jsonl", "state.jsonl", "errors.jsonl"):
        with (run / name).open("ab") as fh:
            fh.write(b'{"key": "torn::pi::1", "session_id": "torn", "trace')
    got = figures(run)
    assert got["live"] is True and got["attempts"] == 12 - got["errors_last_segment"] - got["errors_retried"]
    assert len(list(iter_sessions(run))) == whole
    built = build_report(run)
    assert built.sessions == whole and built.index.exists()


def test_a_session_whose_last_rows_are_not_written_yet_shows_what_is_there(tmp_path: Path) -> None:
    run = tmp_path / "partial"
    run.mkdir()
    rows = session_rows(session_id="half")
    (run / "corpus.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows[:2]))
    (session,) = iter_sessions(run)
    assert len(session.traces()) == 2 and session.head["trace_count"] == len(rows)
    built = build_report(run)
    text = (built.index.parent / "sessions" / session.page).read_text()
    assert '"expected_traces":' + str(len(rows)) in text


def test_rebuilding_writes_only_changed_sessions(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    first = build_report(run, out)
    assert first.pages_written == first.sessions > 0
    assert build_report(run, out).pages_written == 0
    pages = sorted(p.name for p in (out / "sessions").iterdir())
    assert pages == sorted(s.page for s in iter_sessions(run))


def test_without_a_cached_tokenizer_the_viewer_shows_ids(run: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("POLAR_CACHE_DIR", str(tmp_path / "empty-cache"))
    out = tmp_path / "report"
    built = build_report(run, out)
    assert built.tokenizer == "tokenizer qwen3 is not cached here"
    assert (out / "vocab.js").read_text() == "window.POLAR_VOCAB=null;\n"
    page = next((out / "sessions").iterdir()).read_text()
    assert '"tokenizer_note":"tokenizer qwen3 is not cached here"' in page


def test_the_command_writes_the_report_or_one_session(run: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli.build_app(), ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(run / "report" / "index.html")
    wanted = next(iter_sessions(run))
    result = runner.invoke(cli.build_app(), ["report", str(run), "--session", wanted.head["key"]])
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith(f"sessions/{wanted.page}")
    assert find_session(run, wanted.page) is not None
    missing = runner.invoke(cli.build_app(), ["report", str(run), "--session", "nope"])
    assert missing.exit_code == 2 and "no session 'nope'" in missing.output
    assert runner.invoke(cli.build_app(), ["report", str(run / "logs")]).exit_code == 2

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_cli.capture import CaptureRecord, CaptureWriter, read_capture_dir, read_session
from polar_cli.capture.record import Compactor, Expander, JsonBody, byte_delta, common_prefix_len
from polar_cli.capture.store import session_file
from polar_cli.errors import CaptureReadError


def _record(
    seq: int, prompt: list[int], messages: list[dict], session: str = "s1", status: str = "ok", error: str | None = None
) -> CaptureRecord:
    body = {"model": "m", "messages": messages, "tools": [{"name": "Bash"}], "stream": True}
    return CaptureRecord(
        session_id=session,
        seq=seq,
        api="anthropic_messages",
        path="/v1/messages",
        started=1.0 + seq,
        ended=2.0 + seq,
        status=status,  # type: ignore[arg-type]
        request=body,
        request_headers={"user-agent": "claude-cli/2.1.332"},
        normalized={"model": "m", "messages": messages},
        response={"id": f"r{seq}", "choices": []},
        prompt_ids=prompt,
        response_ids=[seq, seq + 1, 7],
        response_logprobs=[-0.5, -0.25, 0.0],
        finish_reason="stop",
        error=error,
    )


def _growing_session(n: int, session: str = "s1") -> list[CaptureRecord]:
    rng = random.Random(n)
    prompt: list[int] = [rng.randrange(1000) for _ in range(50)]
    messages: list[dict] = [{"role": "user", "content": "hi"}]
    records = []
    for seq in range(n):
        records.append(_record(seq, list(prompt), list(messages), session))
        prompt += [rng.randrange(1000) for _ in range(rng.randrange(1, 30))]
        messages.append({"role": "assistant", "content": f"turn {seq}"})
    return records


@settings(max_examples=1000)
@given(st.binary(max_size=300), st.binary(max_size=300), st.binary(max_size=300), st.binary(max_size=50))
def test_byte_delta_round_trips(head: bytes, tail: bytes, mid_a: bytes, mid_b: bytes) -> None:
    text = (head + mid_a + tail).decode("utf-8", "replace").encode()
    base = (head + mid_b + tail).decode("utf-8", "replace").encode()
    stored = byte_delta(text, base)
    assert JsonBody(base).replaced(stored).raw == text
    assert stored["prefix"] + stored["suffix"] <= len(text)


@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 400), st.text(max_size=30)), min_size=1, max_size=25))
def test_a_chain_of_deltas_rebuilds_every_body_from_views(edits: list[tuple[int, int, str]]) -> None:
    """Bodies rebuilt as views into earlier bodies' pieces equal the real bytes, however the pieces fragment."""
    body = JsonBody(b"")
    text = ""
    for start, length, new in edits:
        start = min(start, len(text))
        following = text[:start] + new + text[start + length :]
        stored = byte_delta(following.encode(), text.encode())
        body, text = body.replaced(stored), following
        assert body.raw == text.encode() and body.length == len(body.raw)


def test_byte_delta_never_splits_a_utf8_character() -> None:
    base = "prefix é suffix".encode()
    data = "prefix è suffix".encode()  # é and è share their first UTF-8 byte
    stored = byte_delta(data, base)
    assert stored["middle"] == "è" and JsonBody(base).replaced(stored).raw == data


@pytest.mark.parametrize(
    ("a", "b", "n"), [([], [], 0), ([1, 2, 3], [1, 2], 2), ([1, 2, 3], [1, 9, 3], 1), ([5], [6], 0)]
)
def test_common_prefix_len(a: list[int], b: list[int], n: int) -> None:
    assert common_prefix_len(a, b) == n


def test_common_prefix_len_matches_naive_scan() -> None:
    rng = random.Random(0)
    for _ in range(500):
        a = [rng.randrange(3) for _ in range(rng.randrange(5000))]
        b = a[: rng.randrange(len(a) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(10))]
        naive = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        assert common_prefix_len(a, b) == naive


def test_compact_then_expand_is_exact_and_stores_history_once() -> None:
    records = _growing_session(30)
    compactor, expander = Compactor(), Expander()
    lines = [compactor.compact(r) for r in records]
    assert [expander.expand(line) for line in lines] == records
    # after the first call only the new suffix of the prompt and the new history tail are stored
    assert lines[5]["prompt_ids"]["base"] == 4
    assert len(lines[5]["prompt_ids"]["suffix"]) == len(records[5].prompt_ids) - len(records[4].prompt_ids)
    # the body is stored as the previous call's bytes with only the new turn in the middle
    stored = lines[5]["request"]
    assert stored["middle"] == ',{"role":"assistant","content":"turn 4"}'
    assert stored["prefix"] > 0 and stored["suffix"] > 0
    assert lines[5]["request_headers"] == "same"


def test_interleaved_chains_take_their_prefix_from_their_own_chain() -> None:
    main = [1] * 100
    side = [2] * 80
    records = [
        _record(0, main, []),
        _record(1, side, []),
        _record(2, [*main, 3, 3], []),
        _record(3, [*side, 4], []),
    ]
    compactor, expander = Compactor(), Expander()
    lines = [compactor.compact(r) for r in records]
    assert (lines[2]["prompt_ids"]["base"], lines[2]["prompt_ids"]["suffix"]) == (0, [3, 3])
    assert (lines[3]["prompt_ids"]["base"], lines[3]["prompt_ids"]["suffix"]) == (1, [4])
    assert [expander.expand(line) for line in lines] == records


def test_writer_and_reader_round_trip_many_sessions(tmp_path: Path) -> None:
    writer = CaptureWriter(tmp_path)
    sessions = {f"sess-{i}": _growing_session(10 + i, f"sess-{i}") for i in range(3)}
    for seq in range(12):
        for records in sessions.values():
            if seq < len(records):
                writer.write(records[seq])
    writer.close()
    assert read_capture_dir(tmp_path) == sessions


def test_failed_calls_without_tokens_round_trip(tmp_path: Path) -> None:
    records = _growing_session(3)
    failed = _record(3, [], [], status="upstream_error", error="upstream 503")
    writer = CaptureWriter(tmp_path)
    for r in [*records, failed, _growing_session(5)[4]]:
        writer.write(r)
    writer.close()
    back = read_session(session_file(tmp_path, "s1"))
    assert back[3].error == "upstream 503" and back[3].prompt_ids == []
    assert back[4].prompt_ids == _growing_session(5)[4].prompt_ids


def test_torn_last_line_is_ignored_and_cut_before_the_next_append(tmp_path: Path) -> None:
    records = _growing_session(4)
    writer = CaptureWriter(tmp_path)
    for r in records[:3]:
        writer.write(r)
    writer.close()
    path = session_file(tmp_path, "s1")
    with path.open("ab") as f:
        f.write(b'{"v":1,"session_id":"s1","seq":3,"trunc')  # a kill -9 in the middle of a write
    assert read_session(path) == records[:3]
    writer = CaptureWriter(tmp_path)  # a resumed run appends to the same session
    writer.write(records[3])
    writer.close()
    assert read_session(path) == records


def test_session_ids_cannot_escape_the_capture_dir(tmp_path: Path) -> None:
    assert session_file(tmp_path, "../../etc/passwd").parent == tmp_path


@pytest.mark.parametrize("line", [b'{"v": 99, "seq": 0}\n', b"[1, 2]\n", b'{"session_id": "s"}\n'])
def test_a_corrupt_session_file_is_a_capture_read_error_naming_the_file(tmp_path: Path, line: bytes) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(line)
    with pytest.raises(CaptureReadError, match=r"s\.jsonl: unreadable capture file"):
        read_session(path)

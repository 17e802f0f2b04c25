from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_cli.capture import (
    CaptureRecord,
    CaptureWriter,
    PromptView,
    read_capture_dir,
    read_session,
    read_session_views,
)
from polar_cli.capture.ids import common_prefix_len
from polar_cli.capture.record import _MAX_PIECES, Compactor, Expander, JsonBody, byte_delta
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


def test_a_long_chain_of_deltas_is_joined_before_it_fragments_past_the_bound() -> None:
    body, text = JsonBody(b'{"messages":[]}'), '{"messages":[]}'
    for i in range(2 * _MAX_PIECES):
        following = text[:-2] + ("," if i else "") + f'"m{i}"' + "]}"
        body, text = body.replaced(byte_delta(following.encode(), text.encode())), following
        assert len(body.pieces) <= _MAX_PIECES
    assert body.raw == text.encode() and body["messages"][-1] == f"m{2 * _MAX_PIECES - 1}"
    with pytest.raises(ValueError, match="keeps 10 \\+ 9 bytes of a 15-byte body"):
        JsonBody(b'{"messages":[]}').replaced({"prefix": 10, "suffix": 9, "middle": ""})


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


def _with_prompt_modes(records: list[CaptureRecord]) -> list[CaptureRecord]:
    """Call 0 rendered (nothing to continue), odd calls token-in, call 7 rendered after an edit, the rest unset;
    calls 1 to 4 sampled with weights "v1", calls 6 on with "v2" (a weight sync between), the rest unset."""
    out = []
    for r in records:
        if 1 <= r.seq <= 4 or r.seq >= 6:
            r = dataclasses.replace(r, weight_version="v1" if r.seq <= 4 else "v2")
        if r.seq == 0:
            r = dataclasses.replace(
                r, prompt_mode="rendered", prompt_note="first call", template_rules=("fold_leading_system",)
            )
        elif r.seq == 7:
            r = dataclasses.replace(r, prompt_mode="rendered", prompt_note="history edited at message 3")
        elif r.seq % 2:
            r = dataclasses.replace(r, prompt_mode="token_in")
        out.append(r)
    return out


@pytest.mark.parametrize("views", [False, True])
@pytest.mark.parametrize("modes", [False, True])
def test_compact_then_expand_is_exact_and_stores_history_once(views: bool, modes: bool) -> None:
    records = _growing_session(30)
    if modes:
        records = _with_prompt_modes(records)
    compactor, expander = Compactor(), Expander(views=views)
    lines = [compactor.compact(r) for r in records]
    back = [expander.expand(line) for line in lines]
    assert back == records
    assert all(isinstance(r.prompt_ids, PromptView if views else list) for r in back)
    # after the first call only the new suffix of the prompt and the new history tail are stored
    assert lines[5]["prompt_ids"]["base"] == 4
    assert len(lines[5]["prompt_ids"]["suffix"]) == len(records[5].prompt_ids) - len(records[4].prompt_ids)
    # the body is stored as the previous call's bytes with only the new turn in the middle
    stored = lines[5]["request"]
    assert stored["middle"] == ',{"role":"assistant","content":"turn 4"}'
    assert stored["prefix"] > 0 and stored["suffix"] > 0
    assert lines[5]["request_headers"] == "same"
    # prompt_mode and prompt_note are stored only when set
    assert [(r.prompt_mode, r.prompt_note) for r in back[:3]] == (
        [("rendered", "first call"), ("token_in", None), (None, None)] if modes else [(None, None)] * 3
    )
    assert [k for k in ("prompt_mode", "prompt_note") if k in lines[0]] == (["prompt_mode", "prompt_note"] * modes)
    assert "prompt_note" not in lines[1] and "prompt_mode" not in lines[2]
    if modes:
        assert lines[7]["prompt_note"] == "history edited at message 3"
        assert lines[0]["template_rules"] == ["fold_leading_system"] and back[0].template_rules == (
            "fold_leading_system",
        )
    assert "template_rules" not in lines[1] and back[1].template_rules == ()
    # weight_version likewise
    assert [r.weight_version for r in back[:7]] == ([None, "v1", "v1", "v1", "v1", None, "v2"] if modes else [None] * 7)
    assert ["weight_version" in line for line in lines[:2]] == [False, modes]
    assert "weight_version" not in lines[5]


def test_a_line_written_before_prompt_modes_existed_reads_back_without_them(tmp_path: Path) -> None:
    line = {
        "v": 2, "session_id": "s1", "seq": 0, "api": "openai_chat", "path": "/v1/chat/completions", "started": 1.0,
        "ended": 2.0, "status": "ok", "request": {"prefix": 0, "suffix": 0, "middle": '{"model":"m"}'},
        "request_headers": {}, "normalized": None, "response": None,
        "prompt_ids": {"base": -1, "prefix": 0, "suffix": [1, 2, 3]}, "response_ids": [4, 2],
        "response_logprobs": [-0.5, -0.1], "finish_reason": "stop", "error": None,
    }  # fmt: skip
    path = tmp_path / "s1.jsonl"
    path.write_bytes(orjson.dumps(line) + b"\n")
    for read in (read_session, read_session_views):
        (record,) = read(path)
        assert (record.prompt_mode, record.prompt_note, record.weight_version) == (None, None, None)
        assert record.prompt_ids == [1, 2, 3] and record.request == {"model": "m"}


def test_prompt_views_share_one_buffer_along_a_chain_and_branch_without_changing_earlier_views() -> None:
    a = PromptView.extend(None, 0, [1, 2, 3])
    b = PromptView.extend(a, 3, [4, 5])  # a growing conversation: b's ids are appended to a's buffer
    retry = PromptView.extend(b, 5, [])
    c = PromptView.extend(b, 5, [6])
    edit = PromptView.extend(c, 4, [9, 9])  # history edited after id 4: a buffer of its own
    rewind = PromptView.extend(c, 3, [4, 5])  # back to b: shares again, nothing copied
    assert b.shares_buffer(a) and retry.shares_buffer(b) and c.shares_buffer(a) and rewind.shares_buffer(a)
    assert not edit.shares_buffer(c)
    assert [a, b, retry, c, edit, rewind] == [[1, 2, 3], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6],
                                              [1, 2, 3, 4, 9, 9], [1, 2, 3, 4, 5]]  # fmt: skip
    assert (len(a), a[-1], b[1:4], c[::2], list(b), b.tolist()) == (3, 3, [2, 3, 4], [1, 3, 5], [1, 2, 3, 4, 5], b)
    assert c.index(5) == 4 and c.index(6, 2) == 5
    with pytest.raises(ValueError):
        b.index(6)  # in the buffer, but past this view's end
    with pytest.raises(IndexError):
        b[5]
    assert b == retry and b != c and a != [1, 2] and common_prefix_len(c, b) == 5
    with pytest.raises(ValueError, match="longer than its base"):
        PromptView.extend(a, 4, [])


def test_interleaved_chains_read_as_views_keep_a_buffer_each() -> None:
    main, side = [1] * 100, [2] * 80
    records = [
        _record(0, main, []),
        _record(1, side, []),
        _record(2, [*main, 3, 3], []),
        _record(3, [*side, 4], []),
        _record(4, [*main, 3, 3, 5], []),
    ]
    compactor, expander = Compactor(), Expander(views=True)
    back = [expander.expand(compactor.compact(r)) for r in records]
    assert back == records
    prompts = [r.prompt_ids for r in back]
    assert all(isinstance(p, PromptView) for p in prompts)
    assert prompts[4].shares_buffer(prompts[0]) and prompts[3].shares_buffer(prompts[1])  # type: ignore[attr-defined]
    assert not prompts[1].shares_buffer(prompts[0])  # type: ignore[attr-defined]


def test_a_prompt_whose_base_is_not_among_the_recent_calls_is_a_capture_read_error(tmp_path: Path) -> None:
    compactor = Compactor()
    lines = [compactor.compact(r) for r in _growing_session(2)]
    path = tmp_path / "s1.jsonl"
    for change, message in [
        ({"base": 99, "line": None}, "refer to call 99"),  # an older writer's line: named by seq alone
        ({"line": 99}, "refer to line 99"),
        ({"base": 99}, "refer to line 0 as call 99; it is call 0"),
    ]:
        delta = {**lines[1]["prompt_ids"], **change}
        path.write_bytes(
            orjson.dumps(lines[0]) + b"\n" + orjson.dumps({**lines[1], "prompt_ids": _legacy(delta)}) + b"\n"
        )
        for read in (read_session, read_session_views):
            with pytest.raises(CaptureReadError, match=message):
                read(path)


def _legacy(delta: dict) -> dict:
    return {k: v for k, v in delta.items() if v is not None}


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
    sessions["sess-0"] = _with_prompt_modes(sessions["sess-0"])
    for seq in range(12):
        for records in sessions.values():
            if seq < len(records):
                writer.write(records[seq])
    writer.close()
    assert read_capture_dir(tmp_path) == sessions
    for sid, records in sessions.items():
        assert read_session_views(session_file(tmp_path, sid)) == records


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


def test_a_full_disk_leaves_no_torn_capture_line_and_flush_says_disk_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    from polar_cli.errors import DiskFull

    writer = CaptureWriter(tmp_path)
    first, second = _growing_session(2)
    writer.write(first)
    writer.flush()
    path = session_file(tmp_path, "s1")
    before = path.read_bytes()
    real = os.write

    def half_then_enospc(fd: int, data: bytes | memoryview) -> int:
        if len(data) > 1:
            real(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_enospc)
    writer.write(second)
    with pytest.raises(DiskFull, match="disk full"):
        writer.flush()
    monkeypatch.undo()
    assert path.read_bytes() == before, "the refused write was not cut back off"
    assert [r.seq for r in read_session(path)] == [0]
    with pytest.raises(DiskFull):
        writer.close()

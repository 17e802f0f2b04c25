"""The writer on an event loop: lines written in one loop iteration reach the thread as one batch, on the next one,
in the order they were written; `flush` and `close` hand over what is held first."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import CaptureRecord, CaptureWriter, read_session, store
from polar_cli.capture.store import session_file


def _record(seq: int, session: str = "s1") -> CaptureRecord:
    return CaptureRecord(
        session_id=session,
        seq=seq,
        api="anthropic_messages",
        path="/v1/messages",
        started=1.0 + seq,
        ended=2.0 + seq,
        status="ok",
        request={"model": "m", "messages": [{"role": "user", "content": f"turn {seq}"}]},
        prompt_ids=list(range(10 + seq)),
        response_ids=[seq, 7],
        response_logprobs=[-0.5, 0.0],
        finish_reason="stop",
    )


class _CountingQueue(queue.SimpleQueue[Any]):
    """The writer's queue, counting the batches of lines put on it (each put wakes the thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if isinstance(item, list):
            self.batches.append(len(item))
        super().put(item, block, timeout)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[_CountingQueue]]:
    """The queues of the writers made in the test, which count the batches put on them."""
    made: list[_CountingQueue] = []

    def make() -> _CountingQueue:
        made.append(_CountingQueue())
        return made[-1]

    monkeypatch.setattr(store.queue, "SimpleQueue", make)
    yield made


def test_one_batch_per_loop_iteration(tmp_path: Path, counting: list[_CountingQueue]) -> None:
    writer = CaptureWriter(tmp_path)
    batches = counting[0].batches

    async def serve() -> None:
        for seq in range(3):  # three answers completed in one iteration
            writer.write(_record(seq, "a" if seq % 2 else "b"))
        assert batches == []  # held until the answers of this iteration are written
        await asyncio.sleep(0)
        assert batches == [3]
        writer.write(_record(3, "b"))
        await asyncio.sleep(0)
        assert batches == [3, 1]

    asyncio.run(serve())
    writer.close()
    assert [r.seq for r in read_session(session_file(tmp_path, "b"))] == [0, 2, 3]
    assert [r.seq for r in read_session(session_file(tmp_path, "a"))] == [1]


def test_flush_on_the_loop_hands_over_what_is_held(tmp_path: Path) -> None:
    writer = CaptureWriter(tmp_path)

    async def serve() -> None:
        writer.write(_record(0))
        writer.write(_record(1))
        writer.flush("s1")  # no iteration has passed: flush itself hands the lines over
        assert [r.seq for r in read_session(session_file(tmp_path, "s1"))] == [0, 1]

    asyncio.run(serve())
    writer.close()


def test_close_writes_what_is_held(tmp_path: Path, counting: list[_CountingQueue]) -> None:
    writer = CaptureWriter(tmp_path)
    loop = asyncio.new_event_loop()
    loop.call_soon(writer.write, _record(0))
    loop.call_soon(loop.stop)
    loop.run_forever()
    loop.close()  # the hand-over scheduled on it never ran
    assert counting[0].batches == []
    writer.close()
    assert [r.seq for r in read_session(session_file(tmp_path, "s1"))] == [0]


def test_off_a_loop_a_line_is_handed_over_at_once(tmp_path: Path, counting: list[_CountingQueue]) -> None:
    writer = CaptureWriter(tmp_path)
    batches = counting[0].batches
    writer.write(_record(0))
    writer.write(_record(1))
    assert batches == [1, 1]
    writer.close()
    assert [r.seq for r in read_session(session_file(tmp_path, "s1"))] == [0, 1]

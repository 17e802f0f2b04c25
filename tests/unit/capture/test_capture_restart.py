"""A gateway restarted mid-session with the same key (issue 23 #7): the capture file holds both processes' calls, and
every prompt is rebuilt exactly. Before, each process numbered its calls from 0 and deltas named their base by seq,
so a file held seq 0, 1 twice and a reader rebuilt prompt_ids from the wrong record, silently."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from polar_cli.capture import CaptureWriter, read_session, read_session_views
from polar_cli.capture.record import Compactor
from polar_cli.capture.store import next_seq, session_file
from polar_cli.errors import CaptureReadError
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.translate.upstream import UpstreamOptions
from polar_cli.wire.http11 import Request, Response
from tests.unit.capture.test_capture_store import _growing_session


class PromptUpstream:
    """Answers with prompt ids made from the conversation's text, so a longer history extends its prompt."""

    def __init__(self) -> None:
        self.prompts: list[list[int]] = []

    async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response:
        messages = orjson.loads(body)["messages"]
        prompt = [i for m in messages for i in [*(ord(c) for c in str(m.get("content"))), 0]]
        self.prompts.append(prompt)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": "ok"},
            "logprobs": {"content": [{"token": "o", "logprob": -0.1}, {"token": "k", "logprob": -0.2}]},
            "finish_reason": "stop",
            "prompt_token_ids": prompt,
            "response_token_ids": [7, 8],
        }
        answer = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
        return Response(200, "OK", {}, orjson.dumps(answer), True)

    async def close(self) -> None:
        pass


def _conversation(*texts: str) -> dict:
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]
    return {"model": "claude", "max_tokens": 10, "messages": messages}


def _process(capture_dir: Path, upstream: PromptUpstream, bodies: list[dict], *, resume_seqs: bool) -> None:
    """One `polar proxy` process: its own registry and writer, the session key given again (``--session-key``)."""
    if resume_seqs:
        sessions = SessionRegistry(first_seq=lambda sid: next_seq(session_file(capture_dir, sid)))
    else:
        sessions = SessionRegistry()
    sessions.open("s", "sk-1")
    writer = CaptureWriter(capture_dir)
    gateway = Gateway(upstream=upstream, options=UpstreamOptions(model="m"), sessions=sessions, capture=writer)  # type: ignore[arg-type]

    async def calls() -> None:
        for body in bodies:
            request = Request(
                "POST", "/v1/messages", "/v1/messages", "", {"x-api-key": "sk-1"}, orjson.dumps(body), True
            )
            assert (await gateway.handle(request)).status == 200

    asyncio.run(calls())
    writer.close()


# before the restart: the main conversation; after it: a side request (a title), then the first turn again with
# another answer (the harness's retry), which takes its prefix from the first process's call 0
BEFORE = [_conversation("fix the bug in parser.py"), _conversation("fix the bug in parser.py", "ok", "and tests")]
AFTER = [
    _conversation("write a title for this conversation, please"),
    _conversation("fix the bug in parser.py", "sure", "go on"),
    _conversation("fix the bug in parser.py", "sure", "go on", "ok", "commit"),
]


@pytest.mark.parametrize("resume_seqs", [True, False], ids=["seqs-resumed", "seqs-restart-at-0"])
def test_a_proxy_restart_mid_session_rebuilds_every_prompt_exactly(tmp_path: Path, resume_seqs: bool) -> None:
    upstream = PromptUpstream()
    _process(tmp_path, upstream, BEFORE, resume_seqs=resume_seqs)
    _process(tmp_path, upstream, AFTER, resume_seqs=resume_seqs)
    path = session_file(tmp_path, "s")
    for read in (read_session, read_session_views):
        records = read(path)
        assert [list(r.prompt_ids) for r in records] == upstream.prompts
    seqs = [r.seq for r in read_session(path)]
    # the registry goes on numbering where the file ends (`commands/proxy.py`, `node/gateway.py` wire it); without
    # it seqs repeat, and the deltas' line references still name the right base
    assert seqs == ([0, 1, 2, 3, 4] if resume_seqs else [0, 1, 0, 1, 2])


def test_two_keys_of_one_session_id_share_its_numbering() -> None:
    sessions = SessionRegistry(first_seq=lambda sid: 5)
    sessions.open("s", "sk-1")
    sessions.open("s", "sk-2")
    a, b = sessions.lookup("sk-1"), sessions.lookup("sk-2")
    assert [a.next_seq(), b.next_seq(), a.next_seq()] == [5, 6, 7]
    assert (a.calls, b.calls) == (2, 1)


def test_next_seq_is_one_past_the_highest_seq_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s1.jsonl"
    assert next_seq(path) == 0
    compactor = Compactor()
    records = _growing_session(3)
    lines = [orjson.dumps(compactor.compact(r)) + b"\n" for r in (records[0], records[2], records[1])]
    path.write_bytes(b"".join(lines) + b'{"v":2,"session_id":"s1","seq":9')  # a torn last line counts for nothing
    assert next_seq(path) == 3


def test_an_older_writers_file_whose_base_seq_is_ambiguous_is_refused_loudly(tmp_path: Path) -> None:
    # what an older writer wrote across a restart: seq 0 twice, the last line naming "call 0" by seq alone
    main = _growing_session(2)
    compactor = Compactor()
    lines = [compactor.compact(r) for r in (main[0], main[0], main[1])]
    for line in lines:
        line["prompt_ids"].pop("line")
    lines[1]["prompt_ids"] = {"base": -1, "prefix": 0, "suffix": [5, 5, 5]}
    lines[1]["seq"] = 0
    lines[2]["prompt_ids"]["base"] = 0
    path = tmp_path / "s1.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    for read in (read_session, read_session_views):
        with pytest.raises(CaptureReadError, match="ambiguous"):
            read(path)

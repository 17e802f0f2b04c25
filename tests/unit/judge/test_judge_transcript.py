"""The transcript a judge reads: conversations from traces (records as the fallback), caps, chunks (Rules 1-3)."""

from __future__ import annotations

import dataclasses
import json

from polar_cli.judge.transcript import Caps, build_transcript, chunks, cut, text_of
from polar_cli.trajectory import per_request, prefix_merging
from tests.unit.judge.judge_support import CALL, DONE, RESULT, SYSTEM, TASK, record, session

CAPS = Caps(tool_output_chars=300, message_chars=200)


def test_cut_keeps_head_and_tail_and_names_what_it_cut() -> None:
    assert cut("abc", 3) == "abc"
    text = "H" * 600 + "T" * 400
    out = cut(text, 300)
    assert out.startswith("H" * 200) and out.endswith("T" * 100) and "[... 700 characters cut ...]" in out


def test_messages_render_with_tool_calls_and_capped_tool_outputs_and_no_system_prompt() -> None:
    records = session()
    transcript = build_transcript(per_request(records).traces, records, CAPS)
    text = "\n\n".join(transcript.blocks)
    assert transcript.task == TASK["content"]
    assert "You are Pi" not in text  # the harness's system prompt is left out unless asked for
    assert '-> call bash({"command":"ls"})' in text
    assert "[tool c1]" in text and "[... 4700 characters cut ...]" in text and "x" * 301 not in text
    assert text.endswith("[assistant]\nFixed it: count() now starts at 0.")
    shown = build_transcript(per_request(records).traces, records, Caps(300, 200, include_system=True))
    assert shown.blocks[0].startswith("[system]\nYou are Pi") and len(shown.blocks[0]) < 300


def test_a_continuation_shows_only_what_is_new() -> None:
    records = session()
    # per_request: two traces, the second repeating the first's messages; they are shown once
    per_call = build_transcript(per_request(records).traces, records, CAPS)
    merged = build_transcript(prefix_merging(records, 2).traces, records, CAPS)
    assert per_call.blocks.count(f"[user]\n{TASK['content']}") == 1
    assert per_call.blocks == merged.blocks and not any(b.startswith("===") for b in merged.blocks)
    assert len(merged.blocks) == 4  # user, the tool call, its output, the answer


def test_a_session_without_a_trace_falls_back_to_its_last_ok_record() -> None:
    records = [record(0, [SYSTEM, TASK, CALL, RESULT], DONE)]
    transcript = build_transcript([], records, CAPS)
    assert transcript.blocks[0] == f"[user]\n{TASK['content']}" and transcript.blocks[-1].endswith("now starts at 0.")
    assert build_transcript([], [], CAPS).blocks == ()
    # what a capture reader hands out: the bodies as lazily parsed mappings, not dicts
    from polar_cli.capture.record import JsonBody

    lazy = dataclasses.replace(records[0], normalized=JsonBody(json.dumps(records[0].normalized).encode()))
    assert build_transcript([], [lazy], CAPS).blocks == transcript.blocks


def test_list_content_and_odd_shapes_render_as_text() -> None:
    assert text_of([{"type": "text", "text": "a"}, {"type": "image_url"}, "b"]) == "a\n<image_url>\nb"
    assert text_of(None) == "" and text_of(3) == "3"


def test_chunks_pack_whole_blocks_in_order_and_cut_only_an_oversized_one() -> None:
    records = session()
    transcript = build_transcript(per_request(records).traces, records, Caps(3000, 3000))
    parts = chunks(transcript, 1000)
    assert len(parts) >= 3 and all(len(p) <= 1000 for p in parts)
    assert parts[0].startswith("[user]") and parts[-1].endswith("now starts at 0.")
    whole = chunks(transcript, 100_000)
    assert whole == ["\n\n".join(transcript.blocks)]
    assert chunks(build_transcript([], [], CAPS), 1000) == [""]


def test_a_conversation_of_its_own_is_headed() -> None:
    side = record(
        2, [{"role": "user", "content": "Write a title for this session."}], {"role": "assistant", "content": "T"}
    )
    records = [*session(), side]
    transcript = build_transcript(prefix_merging(records, 2).traces, records, CAPS)
    assert "=== conversation 2 ===" in transcript.blocks and transcript.blocks[-1] == "[assistant]\nT"
    assert transcript.task == TASK["content"]

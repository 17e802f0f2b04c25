"""The IR's history classes are values: equal by content, hashable, usable as keys (they are not frozen dataclasses,
for speed: `translate/ir.py`)."""

from __future__ import annotations

from polar_cli.translate.ir import Image, Message, Text, ToolCall


def _turn() -> Message:
    call = ToolCall(id="toolu_1", name="bash", arguments='{"cmd": "ls"}')
    return Message(role="assistant", content=(Text("ok"), Image("data:image/png;base64,AA==")), tool_calls=(call,))


def test_history_classes_are_equal_and_hash_by_value() -> None:
    a, b = _turn(), _turn()
    assert a == b and a is not b
    assert hash(a) == hash(b)
    assert len({a, b, Message(role="assistant", content=(Text("other"),))}) == 2
    assert {Text("x"): 1}[Text("x")] == 1
    assert hash(ToolCall("i", "n", "{}")) != hash(ToolCall("i", "n", "{}", kind="custom"))

from __future__ import annotations

from polar_cli.trajectory.messages import (
    chat_message,
    flatten_content,
    request_tools,
    response_message,
    tool_call,
)

KEYS = ["role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name"]


def test_every_message_has_the_same_keys() -> None:
    for raw in ({"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c", "content": "y"}):
        assert list(chat_message(raw)) == KEYS
    assert chat_message({"role": "tool", "tool_call_id": "c", "content": "y"})["tool_call_id"] == "c"
    assert chat_message({"role": "user", "content": "x"})["tool_calls"] == []


def test_content_parts_are_joined_like_vllm_and_images_dropped() -> None:
    parts = [
        {"type": "text", "text": "a"},
        {"type": "image_url", "image_url": {"url": "data:"}},
        {"type": "text", "text": "b"},
    ]
    assert flatten_content(parts) == "a\nb"
    assert flatten_content(None) == ""


def test_tool_call_arguments_become_a_json_string() -> None:
    assert tool_call({"id": "c", "function": {"name": "bash", "arguments": {"cmd": "ls"}}}) == {
        "id": "c",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"cmd":"ls"}'},
    }


def test_reasoning_is_read_under_either_engine_name() -> None:
    assert chat_message({"role": "assistant", "reasoning": "think"})["reasoning_content"] == "think"
    assert chat_message({"role": "assistant", "reasoning_content": "hmm"})["reasoning_content"] == "hmm"


def test_response_message_is_the_first_choice_as_an_assistant_turn() -> None:
    response = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "plan",
                    "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                }
            }
        ]
    }
    msg = response_message(response)
    assert msg is not None
    assert (msg["role"], msg["content"], msg["reasoning_content"]) == ("assistant", "", "plan")
    assert msg["tool_calls"][0]["function"]["name"] == "f"
    assert response_message(None) is None
    assert response_message({"choices": []}) is None


def test_request_tools_are_kept_as_given() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    assert request_tools({"tools": tools}) == tools
    assert request_tools(None) == []

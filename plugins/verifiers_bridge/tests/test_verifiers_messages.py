"""Tool calls parsed from sampled text, messages as chat-template dicts, and linear prompts only."""

from __future__ import annotations

import json

import pytest

from minds_verifiers.messages import native_tool, plain_message, split_tool_calls


def test_well_formed_tool_calls_are_taken_out_of_the_text() -> None:
    text = (
        'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
        '<tool_call>{"name": "echo", "arguments": "{\\"x\\": 1}"}</tool_call>'
    )
    content, calls = split_tool_calls(text, turn=3)
    assert content == "Let me add."
    assert calls == [
        {"id": "call_3_0", "name": "add", "arguments": json.dumps({"a": 1, "b": 2})},
        {"id": "call_3_1", "name": "echo", "arguments": '{"x": 1}'},
    ]


@pytest.mark.parametrize(
    "text", ["no calls here", "<tool_call>{not json}</tool_call>", '<tool_call>{"arguments": {}}</tool_call>', "<tool_call>[1]</tool_call>"]
)
def test_text_without_a_well_formed_call_is_left_alone(text: str) -> None:
    assert split_tool_calls(text, turn=1) == (text, [])


def test_messages_and_tools_become_chat_template_dicts() -> None:
    import verifiers as vf  # seconds to import: only in the tests that use it

    call = vf.ToolCall(id="call_1_0", name="add", arguments='{"a": 1}')
    assert plain_message(vf.AssistantMessage(content="", tool_calls=[call])) == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_1_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}],
    }
    assert plain_message(vf.ToolMessage(content="3", tool_call_id="call_1_0")) == {"role": "tool", "content": "3", "tool_call_id": "call_1_0"}
    tool = vf.Tool(name="add", description="Add.", parameters={"type": "object"})
    assert native_tool(tool) == {"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {"type": "object"}}}


def test_only_extensions_of_the_conversation_are_accepted() -> None:
    from minds_verifiers.client import new_messages  # imports verifiers

    known = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    reply = {"role": "user", "content": "Why?"}
    assert new_messages(known, [*known, reply]) == [reply]
    with pytest.raises(ValueError, match="does not extend the conversation"):
        new_messages(known, [known[0], reply])
    with pytest.raises(ValueError, match="does not extend the conversation"):
        new_messages(known, known)

"""The shared text helpers: minus signs, thinking, code fences and tool calls (one behaviour for every plugin)."""

from __future__ import annotations

import pytest

from minds_core import (
    MalformedToolCall,
    ToolCall,
    normalize_minus,
    parse_tool_calls,
    strip_code_fences,
    strip_think,
    strip_tool_calls,
    think_text,
)


def test_typographic_minus_signs_and_dashes_read_as_minus() -> None:
    assert normalize_minus("\u22123, \u20132 and \u20141 but not +4") == "-3, -2 and -1 but not +4"


def test_code_fences_lose_their_markers_but_keep_the_code() -> None:
    assert strip_code_fences("```python\nx = [1, 2]\n```") == "\nx = [1, 2]\n"
    assert strip_code_fences("```c++\nint\n```") == "\nint\n"


@pytest.mark.parametrize(
    ("text", "visible", "thought"),
    [
        ("<think>a</think>b", "b", "a"),
        ("<THINK>a</Think>b<think>c", "b", "a\nc"),  # any case; an unclosed section runs to the end
        ("stray</think>answer", "answer", "stray"),  # the opening tag was in the prompt
        ("x</think>y<think>z</think>w", "yw", "x\nz"),
        ("no thinking", "no thinking", ""),
    ],
)
def test_thinking_is_split_from_the_visible_text(text: str, visible: str, thought: str) -> None:
    assert strip_think(text) == visible
    assert think_text(text) == thought


def test_parses_calls_in_order_with_problems_in_place() -> None:
    text = (
        'first <tool_call>{"name": "add", "arguments": {"value": 2}}</tool_call> then '
        '<tool_call>{"name": "peek"}</tool_call><tool_call>{oops}</tool_call>'
        '<tool_call>{"name": "add", "arguments": "{\\"value\\": 5}"}</tool_call>'
    )
    calls = parse_tool_calls(text)
    assert calls[:2] == [ToolCall("add", {"value": 2}), ToolCall("peek", {})]
    assert isinstance(calls[2], MalformedToolCall) and "not valid JSON" in calls[2].problem
    assert calls[3] == ToolCall("add", {"value": 5})


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("[1, 2]", "expected a JSON object"),
        ('{"arguments": {}}', 'missing "name"'),
        ('{"name": "add", "arguments": [1]}', '"arguments" must be a JSON object'),
        ('{"name": "add", "arguments": "nope"}', "is a string that is not a JSON object"),
        ('{"name": "add", "args": {}}', "unexpected keys ['args']"),
    ],
)
def test_malformed_calls_say_what_is_wrong(body: str, problem: str) -> None:
    (call,) = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert isinstance(call, MalformedToolCall)
    assert problem in call.problem


def test_unclosed_call_is_read_to_the_end_and_reasoning_is_ignored() -> None:
    assert parse_tool_calls('<tool_call>{"name": "peek", "arguments": {}}') == [ToolCall("peek", {})]
    text = '<think>maybe <tool_call>{"name": "explode"}</tool_call></think>no calls here'
    assert parse_tool_calls(text) == []
    assert strip_think(text) == "no calls here"
    assert "maybe" in think_text(text)
    assert parse_tool_calls("plain words") == []


def test_strip_tool_calls_keeps_thinking_and_malformed_blocks() -> None:
    call = '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    thinking = f"<think>{call}</think>"
    text = f"Let me add. {call}{thinking}<tool_call>{{oops}}</tool_call>"
    assert strip_tool_calls(text) == f"Let me add. {thinking}<tool_call>{{oops}}</tool_call>"
    assert parse_tool_calls(text) == [ToolCall("add", {"a": 1}), MalformedToolCall("{oops}", parse_tool_calls("<tool_call>{oops}")[0].problem)]

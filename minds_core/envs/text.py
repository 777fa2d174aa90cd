"""Reading model replies: minus signs, ``<think>`` sections, code fences and ``<tool_call>`` blocks.

One behaviour for every environment and bridge:

- ``normalize_minus`` reads the typographic minus (U+2212), en dash (U+2013)
  and em dash (U+2014) as ``-``;
- thinking is every ``<think>...</think>`` section (any case; an unclosed one
  runs to the end of the text) and everything before a stray ``</think>``
  whose opening tag was part of the prompt;
- a tool call is a Hermes-style ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  block outside thinking (an unclosed last block runs to the end); a block that
  is not such a call is a ``MalformedToolCall`` saying why.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u2014": "-"})
_FENCE = re.compile(r"```[\w+-]*")
_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|$)", re.IGNORECASE | re.DOTALL)
_THINK_END = re.compile(r"</think>", re.IGNORECASE)
_THINK_TAGS = re.compile(r"</?think>", re.IGNORECASE)

#: The tags around a tool call.
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|$)", re.DOTALL)


def normalize_minus(text: str) -> str:
    """``text`` with typographic minus signs and dashes written as ``-``."""
    return text.translate(_MINUS_SIGNS)


def strip_code_fences(text: str) -> str:
    """``text`` without code-fence markers (three backticks and an optional language tag); the code stays."""
    return _FENCE.sub("", text)


def _think_spans(text: str) -> list[tuple[int, int]]:
    """Where the thinking of ``text`` lies, as (start, end) spans in order."""
    spans = [m.span() for m in _THINK_BLOCK.finditer(text)]
    stray_end = 0
    for start, end in _gaps(spans, len(text)):
        for match in _THINK_END.finditer(text, start, end):
            stray_end = match.end()
    if stray_end:  # a closing tag whose opening tag was in the prompt: all before it is thinking
        spans = [(0, stray_end), *(s for s in spans if s[0] >= stray_end)]
    return spans


def _gaps(spans: list[tuple[int, int]], length: int) -> list[tuple[int, int]]:
    """The spans of ``range(length)`` between the given ordered, disjoint spans."""
    gaps, position = [], 0
    for start, end in spans:
        gaps.append((position, start))
        position = end
    gaps.append((position, length))
    return gaps


def _visible(text: str) -> list[str]:
    """The pieces of ``text`` outside thinking, in order."""
    return [text[start:end] for start, end in _gaps(_think_spans(text), len(text))]


def strip_think(text: str) -> str:
    """``text`` without its thinking."""
    return "".join(_visible(text))


def think_text(text: str) -> str:
    """The thinking of ``text`` without its tags, one section per line."""
    return "\n".join(_THINK_TAGS.sub("", text[start:end]).strip() for start, end in _think_spans(text))


@attrs.frozen
class ToolCall:
    """A well-formed tool call: a tool name and a JSON object of arguments."""

    name: str  #: the tool to call
    arguments: dict[str, Any]  #: its arguments (an OpenAI-style JSON string is decoded)


@attrs.frozen
class MalformedToolCall:
    """A ``<tool_call>`` block that is not a call, and why (a sentence that can be shown to the model)."""

    text: str  #: the block's body, stripped
    problem: str  #: what is wrong with it


def parse_tool_calls(text: str) -> list[ToolCall | MalformedToolCall]:
    """Every ``<tool_call>`` block outside thinking, in order, read or explained."""
    return [_parse_call(m.group(1)) for part in _visible(text) for m in _CALL.finditer(part)]


def strip_tool_calls(text: str) -> str:
    """``text`` without its well-formed tool-call blocks; thinking and malformed blocks stay."""

    def drop(match: re.Match[str]) -> str:
        return "" if isinstance(_parse_call(match.group(1)), ToolCall) else match.group(0)

    spans = _think_spans(text)
    pieces = []
    for (start, end), (think_start, think_end) in zip(_gaps(spans, len(text)), [*spans, (len(text), len(text))]):
        pieces += [_CALL.sub(drop, text[start:end]), text[think_start:think_end]]
    return "".join(pieces)


def call_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as an object (OpenAI style writes them as a JSON string); a ValueError says what is wrong."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            raise ValueError('"arguments" is a string that is not a JSON object') from None
    if not isinstance(arguments, dict):
        raise ValueError(f'"arguments" must be a JSON object, got {type(arguments).__name__}')
    return arguments


def _parse_call(body: str) -> ToolCall | MalformedToolCall:
    body = body.strip()
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as exc:
        return MalformedToolCall(body, f"not valid JSON ({exc.msg} at position {exc.pos})")
    if not isinstance(payload, dict):
        return MalformedToolCall(body, f"expected a JSON object, got {type(payload).__name__}")
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return MalformedToolCall(body, 'missing "name" (the tool to call, a string)')
    try:
        arguments = call_arguments(payload.get("arguments", {}))
    except ValueError as exc:
        return MalformedToolCall(body, str(exc))
    extra = sorted(set(payload) - {"name", "arguments"})
    if extra:
        return MalformedToolCall(body, f'unexpected keys {extra}: write only "name" and "arguments"')
    return ToolCall(name, arguments)

"""Tool calls in the model's text: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|$)", re.DOTALL)
_REASONING = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)


@attrs.frozen
class ToolCall:
    """A well-formed call: a tool name and a JSON object of arguments."""

    name: str
    arguments: dict[str, Any]


@attrs.frozen
class Malformed:
    """A ``<tool_call>`` block that could not be read, and why (shown to the model)."""

    text: str
    problem: str


def without_reasoning(text: str) -> str:
    """The text with ``<think>...</think>`` sections removed (calls in them are not made)."""
    return _REASONING.sub("", text)


def reasoning(text: str) -> str:
    """The concatenated contents of the ``<think>`` sections of ``text``."""
    return "\n".join(m.group(0).removeprefix("<think>").removesuffix("</think>").strip() for m in _REASONING.finditer(text))


def parse_tool_calls(text: str) -> list[ToolCall | Malformed]:
    """Every ``<tool_call>`` block in order; an unclosed last block is read up to the end."""
    return [_parse_one(match.group(1)) for match in _CALL.finditer(without_reasoning(text))]


def _parse_one(body: str) -> ToolCall | Malformed:
    body = body.strip()
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as exc:
        return Malformed(body, f"not valid JSON ({exc.msg} at position {exc.pos})")
    if not isinstance(payload, dict):
        return Malformed(body, f"expected a JSON object, got {type(payload).__name__}")
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return Malformed(body, 'missing "name" (the tool to call, a string)')
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):  # OpenAI style: the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return Malformed(body, '"arguments" is a string that is not a JSON object')
    if not isinstance(arguments, dict):
        return Malformed(body, f'"arguments" must be a JSON object, got {type(arguments).__name__}')
    extra = sorted(set(payload) - {"name", "arguments"})
    if extra:
        return Malformed(body, f'unexpected keys {extra}: write only "name" and "arguments"')
    return ToolCall(name, arguments)

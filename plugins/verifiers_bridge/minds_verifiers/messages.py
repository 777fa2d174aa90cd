"""verifiers messages and tools as the plain chat dicts of a chat template, and tool calls parsed from text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from minds_core import ToolCall, parse_tool_calls, strip_tool_calls


def plain_message(message: Any) -> dict[str, Any]:
    """A verifiers message (pydantic model or dict) as a chat-template dict, without empty fields."""
    data = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    plain = {k: v for k, v in data.items() if v is not None}
    if plain.get("tool_calls"):
        plain["tool_calls"] = [
            {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}
            for call in plain["tool_calls"]
        ]
    return plain


def plain_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    return [plain_message(m) for m in messages]


def native_tool(tool: Any) -> dict[str, Any]:
    """A ``vf.Tool`` in the OpenAI function format chat templates expect."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def split_tool_calls(text: str, turn: int) -> tuple[str, list[dict[str, str]]]:
    """The text outside well-formed tool calls, and the calls as {id, name, arguments (JSON)}.

    Calls are read by ``minds_core.parse_tool_calls``; a malformed block stays in the text: it is not a call.
    """
    found = [call for call in parse_tool_calls(text) if isinstance(call, ToolCall)]
    calls = [
        {"id": f"call_{turn}_{i}", "name": call.name, "arguments": json.dumps(call.arguments)} for i, call in enumerate(found)
    ]
    return (strip_tool_calls(text).strip() if calls else text), calls

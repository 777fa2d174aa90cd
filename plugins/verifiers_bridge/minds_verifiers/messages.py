"""verifiers messages and tools as the plain chat dicts of a chat template, and tool calls parsed from text."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

#: Hermes-style tool calls (the format of Qwen and Hermes chat templates).
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


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
    """The text outside well-formed ``<tool_call>`` blocks, and the calls as {id, name, arguments (JSON)}.

    A block whose JSON has no string ``name`` stays in the text: it is not a call.
    """
    calls: list[dict[str, str]] = []

    def take(match: re.Match[str]) -> str:
        try:
            payload = json.loads(match.group(1))
        except json.JSONDecodeError:
            return match.group(0)
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            return match.group(0)
        arguments = payload.get("arguments", {})
        calls.append(
            {
                "id": f"call_{turn}_{len(calls)}",
                "name": payload["name"],
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            }
        )
        return ""

    content = TOOL_CALL.sub(take, text)
    return (content.strip() if calls else text), calls

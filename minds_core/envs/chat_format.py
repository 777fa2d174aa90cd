"""Chat messages in OpenAI's format, as chat templates read them: tool calls checked and written the one way.

An assistant message may carry ``tool_calls`` (``[{"id", "type": "function", "function":
{"name", "arguments"}}]``, its ``content`` then null or absent); a ``tool`` message answers one
(``tool_call_id``). SFT data and the inference surfaces read messages through these helpers.
A chat template that renders no tools (``Renderer.supports_tools`` false) is shown each call as
the Hermes ``<tool_call>`` block minds' parser reads back (``envs.text``).
"""

from __future__ import annotations

import json
from typing import Any

from minds_core.contract.environment import Message
from minds_core.envs.text import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, call_arguments

__all__ = ["call_problem", "hermes_block", "template_message"]


def call_problem(call: Any) -> str | None:
    """What is wrong with one OpenAI-style tool call (``{"function": {"name": ..., "arguments": ...}}``), or None."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        return 'needs a "function" with a "name"'
    try:
        call_arguments(function.get("arguments", {}))
    except ValueError as exc:
        return str(exc)
    return None


def hermes_block(name: str, arguments: dict[str, Any]) -> str:
    """A tool call as the Hermes block minds' parser reads: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``."""
    return f"{TOOL_CALL_OPEN}{json.dumps({'name': name, 'arguments': arguments})}{TOOL_CALL_CLOSE}"


def template_message(message: Message, renders_tools: bool = True) -> Message:
    """``message`` as chat templates read it: tool-call arguments as objects, null content beside tool calls as "".

    ``renders_tools`` false (a template that renders no tool calls): the calls are appended to the
    content as Hermes blocks, so the model sees what it would have written."""
    if not message.get("tool_calls"):
        return message
    calls = [
        {**call, "function": {**call["function"], "arguments": call_arguments(call["function"].get("arguments", {}))}}
        for call in message["tool_calls"]
    ]
    if not renders_tools:
        blocks = "".join(hermes_block(call["function"]["name"], call["function"]["arguments"]) for call in calls)
        return {key: value for key, value in message.items() if key != "tool_calls"} | {
            "content": (message.get("content") or "") + blocks
        }
    return {**message, "content": message.get("content") or "", "tool_calls": calls}

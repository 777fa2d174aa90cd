"""What the model sees: tool specs, the tool-use instructions, prompts and the environment's replies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from minds_core import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, Message

_TOOL_INSTRUCTIONS = """\
You can use tools. To call a tool, write one JSON object between tags, like this:
{open}{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}{close}
You may make several calls in one reply. Each result comes back to you inside
<tool_response></tool_response> tags.{final}
Tools:
{tools}"""

FINAL_ANSWER = "When you are done, reply without any tool call: that reply is your final answer."


def chat_tool_spec(name: str, description: str, schema: dict[str, Any] | None) -> dict[str, Any]:
    """One tool in the OpenAI chat ``tools`` format that chat templates render."""
    from openreward.api.environments.client import sanitize_tool_schema

    parameters = sanitize_tool_schema(schema, "anthropic") or {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def tool_instructions(tools: Sequence[dict[str, Any]], final_answer: bool) -> str:
    """The system-prompt text that teaches the call format when the chat template cannot render tools."""
    listing = "\n".join(json.dumps(tool["function"], separators=(",", ":")) for tool in tools)
    return _TOOL_INSTRUCTIONS.format(open=TOOL_CALL_OPEN, close=TOOL_CALL_CLOSE, final="\n" + FINAL_ANSWER if final_answer else "", tools=listing)


def with_system_text(messages: list[Message], text: str) -> list[Message]:
    """``messages`` with ``text`` leading the system prompt (a new one when there is none)."""
    if messages and messages[0].get("role") == "system":
        return [{"role": "system", "content": f"{text}\n\n{messages[0]['content']}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def blocks_text(blocks: Sequence[Any]) -> str:
    """Plain text of ORS content blocks; images become a short placeholder."""
    parts = []
    for block in blocks:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "image":
            parts.append(f"[image: {block.mimeType}]")
        elif kind == "reasoning":
            parts.append(f"<think>{block.text}</think>")
        elif kind == "tool_call":
            parts.append(TOOL_CALL_OPEN + json.dumps({"name": block.name, "arguments": block.input}) + TOOL_CALL_CLOSE)
        elif kind == "tool_result":
            parts.append(tool_response_text(blocks_text(block.blocks)))
    return "\n".join(parts)


def prompt_messages(ors_messages: Sequence[Any]) -> list[Message]:
    """The task's ORS messages (role + blocks) as chat messages."""
    return [{"role": m.role, "content": blocks_text(m.blocks)} for m in ors_messages]


def tool_response_text(text: str) -> str:
    return f"<tool_response>\n{text}\n</tool_response>"


def reply_messages(replies: Sequence[tuple[str, str]], in_template: bool) -> list[Message]:
    """The environment's reply to one turn: ``(kind, text)`` with kind "tool" or "feedback".

    With a tool-aware chat template, tool outputs are ``tool`` messages; otherwise
    all of them go back in one user message, each output in <tool_response> tags.
    """
    if in_template:
        return [{"role": "tool" if kind == "tool" else "user", "content": text} for kind, text in replies]
    return [{"role": "user", "content": "\n".join(tool_response_text(t) if k == "tool" else t for k, t in replies)}]


def malformed_feedback(problem: str) -> str:
    return f"Your tool call could not be read: {problem}. Write {TOOL_CALL_OPEN}{{\"name\": ..., \"arguments\": {{...}}}}{TOOL_CALL_CLOSE}."


def rejected_feedback(name: str, reason: str, detail: str) -> str:
    return f"The call to {name!r} was rejected ({reason}): {detail}"


def no_call_feedback(tool_names: Sequence[str]) -> str:
    return f"No tool call found. Call one of the tools ({', '.join(tool_names)}) with {TOOL_CALL_OPEN}...{TOOL_CALL_CLOSE}."

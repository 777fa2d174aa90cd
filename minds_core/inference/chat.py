"""Chat messages in, prompt tokens out; a sampled reply back to text, thinking and tool calls.

Both chat surfaces (OpenAI and Anthropic) read their messages into minds' message format
(OpenAI's: ``role``, string ``content``, ``tool_calls``, ``tool_call_id``), render them with
the model's chat template through ``Renderer`` and read replies with minds' own parsers
(``envs.text``): the tokens a client is served are the tokens a run trains on.
"""

from __future__ import annotations

import uuid
from typing import Any

import attrs

from minds_core.contract.environment import Message
from minds_core.envs.chat_format import call_problem, template_message
from minds_core.envs.render import Renderer, TemplateError
from minds_core.envs.text import ToolCall, parse_tool_calls, strip_think, strip_tool_calls, think_text

from .errors import bad_request
from .fields import Fields

__all__ = ["Reply", "ToolChoice", "openai_messages", "openai_tools", "read_reply", "render_prompt"]

#: Roles a chat request may give (``developer`` is read as ``system``).
ROLES = ("system", "developer", "user", "assistant", "tool")


@attrs.frozen
class ToolChoice:
    """Which tools the model is shown and whether its reply is read for calls (OpenAI's ``tool_choice``).

    minds does not constrain decoding: "required" and a named function render the tools (only the
    named one) and read calls as "auto" does; "none" renders none and reads none."""

    tools: tuple[dict[str, Any], ...] = ()  #: the tool specs rendered, OpenAI's ``{"type": "function", "function": {...}}``
    parse: bool = False  #: whether the reply is read for tool calls


@attrs.frozen
class Reply:
    """A sampled reply, read: what the client is shown."""

    content: str  #: the visible text: thinking and well-formed tool calls removed
    reasoning: str  #: the thinking (``<think>`` sections), "" when none
    calls: tuple[ToolCall, ...]  #: the well-formed tool calls, in order


def _text_content(content: Any, where: str) -> str:
    """A message's content as text: a string, or an array of text parts (joined)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise bad_request(f"{where} must be a string or an array of content parts, got {type(content).__name__}", where)
    texts = []
    for i, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise bad_request(
                f'{where}[{i}] is not a text part ({{"type": "text", "text": ...}}): minds serves text-only models',
                f"{where}[{i}]",
            )
        texts.append(part["text"])
    return "".join(texts)


def openai_messages(raw: Any) -> list[Message]:
    """OpenAI chat ``messages``, checked, as minds messages (a 400 names the first bad one and why)."""
    if not isinstance(raw, list) or not raw:
        raise bad_request('messages must be a non-empty array of {"role": ..., "content": ...}', "messages")
    messages = []
    for i, item in enumerate(raw):
        fields = Fields(item, f"messages[{i}]")
        role = fields.string("role")
        if role not in ROLES:
            raise bad_request(f"messages[{i}].role {role!r} is not one of {', '.join(ROLES)}", f"messages[{i}].role")
        message: Message = {
            "role": "system" if role == "developer" else role,
            "content": _text_content(item.get("content"), f"messages[{i}].content"),
        }
        calls = fields.array("tool_calls", [])
        if calls:
            if role != "assistant":
                raise bad_request(f"messages[{i}]: tool_calls belong on an assistant message", f"messages[{i}].tool_calls")
            for j, call in enumerate(calls):
                if problem := call_problem(call):
                    raise bad_request(f"messages[{i}].tool_calls[{j}] {problem}", f"messages[{i}].tool_calls[{j}]")
            message["tool_calls"] = calls
        if role == "tool":
            message["tool_call_id"] = str(item.get("tool_call_id") or "")
        if isinstance(item.get("name"), str):
            message["name"] = item["name"]
        messages.append(message)
    return messages


def openai_tools(tools: Any, choice: Any) -> ToolChoice:
    """OpenAI ``tools`` and ``tool_choice`` read into a ``ToolChoice``."""
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        raise bad_request('tools must be an array of {"type": "function", "function": {...}}', "tools")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        named = isinstance(function, dict) and isinstance(function.get("name"), str)
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not named:
            raise bad_request(
                f'tools[{i}] must be {{"type": "function", "function": {{"name": ..., "parameters": ...}}}}', f"tools[{i}]"
            )
    if choice is None or choice in ("auto", "required"):
        return ToolChoice(tuple(tools), bool(tools))
    if choice == "none":
        return ToolChoice()
    name = (
        choice.get("function", {}).get("name") if isinstance(choice, dict) and isinstance(choice.get("function"), dict) else None
    )
    named = [tool for tool in tools if tool["function"]["name"] == name]
    if not named:
        raise bad_request(
            f'tool_choice {choice!r} is not "none", "auto", "required" or {{"type": "function", "function": '
            '{"name": ...}} naming one of the tools',
            "tool_choice",
        )
    return ToolChoice(tuple(named), True)


def render_prompt(renderer: Renderer, messages: list[Message], tools: ToolChoice) -> list[int]:
    """The prompt tokens of ``messages`` with the chat template, its assistant generation prompt and ``tools``."""
    shown = [template_message(message, renderer.supports_tools) for message in messages]
    try:
        return renderer.prompt_tokens(shown, list(tools.tools) or None)
    except TemplateError as exc:
        raise bad_request(f"messages cannot be rendered with the model's chat template: {exc}", "messages") from None
    except Exception as exc:  # noqa: BLE001 - a template raising on the given messages (jinja's errors)
        raise bad_request(f"the model's chat template refused these messages: {type(exc).__name__}: {exc}", "messages") from None


def read_reply(text: str, parse_calls: bool) -> Reply:
    """A sampled reply read with minds' parsers: thinking, well-formed tool calls (when asked for) and the rest."""
    visible = strip_think(text)
    calls = tuple(call for call in parse_tool_calls(text) if isinstance(call, ToolCall)) if parse_calls else ()
    content = strip_tool_calls(visible).strip() if calls else visible
    return Reply(content, think_text(text) if visible != text else "", calls)


def call_id(prefix: str) -> str:
    """A fresh id for a tool call (``call_...`` for OpenAI, ``toolu_...`` for Anthropic)."""
    return f"{prefix}{uuid.uuid4().hex[:24]}"

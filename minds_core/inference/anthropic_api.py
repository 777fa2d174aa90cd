"""Anthropic's Messages API over a ``Surface``: ``/v1/messages`` and ``/v1/messages/count_tokens``.

Requests and answers are Anthropic's (https://docs.anthropic.com/en/api/messages), so the
official ``anthropic`` SDK works unmodified: ``system`` (text or text blocks), ``messages`` whose
content is text or blocks (``text``, ``tool_use``, ``tool_result``; ``thinking`` blocks sent back are
dropped), ``tools`` (``name``, ``description``, ``input_schema``), ``tool_choice``, ``max_tokens``,
``temperature``, ``top_p``, ``top_k``, ``stop_sequences`` and ``stream`` (the named events
``message_start``, ``content_block_start``/``_delta``/``_stop``, ``message_delta``, ``message_stop``).

The conversation is read into minds' messages (a ``tool_use`` is an OpenAI-style tool call, a
``tool_result`` a ``tool`` message) and rendered and read exactly as the OpenAI surface does.
Extensions on the answer: ``prompt_token_ids``, ``token_ids`` and ``logprobs`` (one per sampled token).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from minds_core.contract.environment import Message

from .chat import ToolChoice, call_id, openai_tools, read_reply, render_prompt
from .errors import bad_request
from .fields import Fields
from .sampling import MAX_STOPS, SampledCall, SamplingRequest
from .surface import Event, Stream, Surface

__all__ = ["count_tokens", "messages"]


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """A message's content as blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise bad_request(f"{where} must be a string or an array of content blocks", where)
    for i, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise bad_request(f'{where}[{i}] must be a content block ({{"type": ...}})', f"{where}[{i}]")
    return content


def _text(block: dict[str, Any], where: str) -> str:
    if not isinstance(block.get("text"), str):
        raise bad_request(f"{where}.text must be a string", f"{where}.text")
    return block["text"]


def _result_text(block: dict[str, Any], where: str) -> str:
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    parts = _blocks(content, f"{where}.content")
    return "".join(_text(part, f"{where}.content[{i}]") for i, part in enumerate(parts) if part["type"] == "text")


def anthropic_messages(body: dict[str, Any]) -> list[Message]:
    """``system`` and ``messages`` as minds messages (a 400 names the first bad block and why)."""
    out: list[Message] = []
    system = body.get("system")
    if system is not None:
        blocks = _blocks(system, "system")
        out.append({"role": "system", "content": "".join(_text(b, f"system[{i}]") for i, b in enumerate(blocks))})
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise bad_request('messages must be a non-empty array of {"role": "user" | "assistant", "content": ...}', "messages")
    for i, item in enumerate(raw):
        fields = Fields(item, f"messages.{i}")
        role = fields.string("role")
        if role not in ("user", "assistant"):
            raise bad_request(
                f'messages.{i}.role {role!r} must be "user" or "assistant" (system goes in the top-level system)',
                f"messages.{i}.role",
            )
        texts, calls = [], []
        for j, block in enumerate(_blocks(item.get("content"), f"messages.{i}.content")):
            where, kind = f"messages.{i}.content.{j}", block["type"]
            if kind == "text":
                texts.append(_text(block, where))
            elif kind == "tool_use" and role == "assistant":
                if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
                    raise bad_request(f"{where}: a tool_use block needs a name and an input object", where)
                calls.append(
                    {
                        "id": str(block.get("id") or ""),
                        "type": "function",
                        "function": {"name": block["name"], "arguments": block.get("input", {})},
                    }
                )
            elif kind == "tool_result" and role == "user":
                out.append(
                    {"role": "tool", "tool_call_id": str(block.get("tool_use_id") or ""), "content": _result_text(block, where)}
                )
            elif kind in ("thinking", "redacted_thinking") and role == "assistant":
                continue  # the template renders past turns without their thinking
            else:
                raise bad_request(
                    f"{where}: a {kind!r} block is not accepted in a {role} message (minds serves text, tool_use and tool_result)",
                    where,
                )
        if texts or calls or role == "assistant":
            message: Message = {"role": role, "content": "".join(texts)}
            if calls:
                message["tool_calls"] = calls
            out.append(message)
    return out


def anthropic_tools(body: dict[str, Any]) -> ToolChoice:
    """``tools`` and ``tool_choice`` as OpenAI function specs and a ``ToolChoice``."""
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise bad_request('tools must be an array of {"name", "description", "input_schema"}', "tools")
    specs = []
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise bad_request(f"tools.{i} must be an object with a name (and description, input_schema)", f"tools.{i}")
        function = {"name": tool["name"], "description": tool.get("description", ""), "parameters": tool.get("input_schema", {})}
        specs.append({"type": "function", "function": function})
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else None
    if choice is not None and kind not in ("auto", "any", "tool", "none"):
        raise bad_request('tool_choice must be {"type": "auto" | "any" | "tool" | "none"}', "tool_choice")
    openai_choice = {"tool": {"type": "function", "function": {"name": (choice or {}).get("name")}}, "none": "none"}.get(
        kind or "auto", "auto"
    )
    return openai_tools(specs, openai_choice)


def _request(body: dict[str, Any]) -> tuple[Fields, list[Message], ToolChoice]:
    fields = Fields(body)
    fields.required("model")
    return fields, anthropic_messages(body), anthropic_tools(body)


def count_tokens(surface: Surface, body: dict[str, Any], caller: str) -> dict[str, Any]:
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``, the rendered prompt's length."""
    fields, messages, tools = _request(body)
    policy = surface.models.policy(body["model"], caller)
    return {"input_tokens": len(render_prompt(policy.renderer, messages, tools))}


_STOP_REASONS = {"length": "max_tokens", "stop": "end_turn"}


def messages(surface: Surface, body: dict[str, Any], caller: str) -> dict[str, Any] | Stream:
    """``POST /v1/messages``: a ``message``, or its events when ``stream`` is true."""
    fields, conversation, tools = _request(body)
    max_tokens = fields.integer("max_tokens", 1)

    def build(policy: Any) -> SamplingRequest:
        return SamplingRequest(
            prompt=tuple(render_prompt(policy.renderer, conversation, tools)),
            max_tokens=max_tokens,
            temperature=fields.number("temperature", 0.0, 1.0, 1.0),
            top_p=fields.number("top_p", 1e-9, 1.0, 1.0),
            top_k=fields.integer("top_k", 1, None, -1),
            stop=tuple(fields.strings("stop_sequences", MAX_STOPS)),
        )

    _, call = surface.sample(body["model"], caller, build)
    message = _message(call, tools.parse)
    if not fields.boolean("stream"):
        return message
    return _stream(message)


def _message(call: SampledCall, parse_calls: bool) -> dict[str, Any]:
    completion = call.completions[0]
    reply = read_reply(completion.text, parse_calls)
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        content.append({"type": "thinking", "thinking": reply.reasoning, "signature": ""})
    if reply.content or not reply.calls:
        content.append({"type": "text", "text": reply.content})
    content += [{"type": "tool_use", "id": call_id("toolu_"), "name": c.name, "input": c.arguments} for c in reply.calls]
    reason = "tool_use" if reply.calls else "stop_sequence" if completion.stop_string else _STOP_REASONS[completion.finish]
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": call.model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": completion.stop_string,
        "usage": {"input_tokens": len(call.prompt), "output_tokens": len(completion.tokens)},
        "prompt_token_ids": list(call.prompt),
        "token_ids": list(completion.tokens),
        "logprobs": list(completion.logprobs),
    }


def _stream(message: dict[str, Any]) -> Stream:
    """The events the SDK's stream reads a message from (whole blocks: sampling is done before they are sent)."""
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**message["usage"], "output_tokens": 0},
    }
    events = [Event({"type": "message_start", "message": start}, "message_start")]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        empty = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": "", "signature": ""}}.get(
            kind
        )
        events.append(
            Event(
                {"type": "content_block_start", "index": index, "content_block": empty or {**block, "input": {}}},
                "content_block_start",
            )
        )
        if kind == "text":
            delta = {"type": "text_delta", "text": block["text"]}
        elif kind == "thinking":
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
        else:
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(Event({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"))
        events.append(Event({"type": "content_block_stop", "index": index}, "content_block_stop"))
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    events.append(
        Event(
            {"type": "message_delta", "delta": delta, "usage": {"output_tokens": message["usage"]["output_tokens"]}},
            "message_delta",
        )
    )
    events.append(Event({"type": "message_stop"}, "message_stop"))
    return Stream(events)

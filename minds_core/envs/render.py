"""Rendering chat messages to tokens with the model's chat template.

The tokens a policy sampled are the tokens it is trained on: a reply is never
decoded and re-encoded. Later turns are appended to the sampled sequence as
*continuations*: the text the chat template puts after the sampled turn and
around the environment's reply, tokenized on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from minds_core.base.logs import get_logger
from minds_core.contract.environment import Message

log = get_logger("render")

_SENTINEL = "MINDS_TURN_SENTINEL_7F3A"


class TemplateError(ValueError):
    """The chat template cannot render a multi-turn conversation token-exactly."""


def _tool_name(tool: Any) -> str:
    """A tool spec's name (``{"function": {"name": ...}}`` or ``{"name": ...}``), "?" where it has none."""
    spec = tool.get("function", tool) if isinstance(tool, dict) else None
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else "?"


class Renderer:
    """Turns messages into prompt tokens and multi-turn continuations for one tokenizer."""

    def __init__(self, tokenizer: Any, template_args: dict[str, Any] | None = None) -> None:
        """``template_args`` go to every apply_chat_template call (e.g. ``enable_thinking``)."""
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError(f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template")
        self.tokenizer = tokenizer
        self.template_args = dict(template_args or {})
        self.supports_tools = "tools" in tokenizer.chat_template
        self._warned_tools = False

    def _text(self, messages: Sequence[Message], *, generation_prompt: bool, tools: list[dict] | None) -> str:
        kwargs: dict[str, Any] = dict(self.template_args)
        if tools and self.supports_tools:
            kwargs["tools"] = tools
        elif tools and not self._warned_tools:  # once per renderer (a run's): the episodes' tools never reach the model
            self._warned_tools = True
            log.warning(
                "tools not shown",
                model=getattr(self.tokenizer, "name_or_path", "?"),
                tools=[_tool_name(tool) for tool in tools],
                reason="the model's chat template does not render tools, so the policy never sees the tools an episode "
                "offers; use a model whose template renders them, or describe them in the prompt",
            )
        return self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=generation_prompt, **kwargs
        )

    def text(self, messages: Sequence[Message], *, generation_prompt: bool = False, tools: list[dict] | None = None) -> str:
        """The chat template's text of ``messages`` (with the assistant's generation prompt when asked, and ``tools``)."""
        return self._text(messages, generation_prompt=generation_prompt, tools=tools)

    @cached_property
    def max_token_chars(self) -> int | None:
        """The most characters one token stands for (its longest vocabulary entry), None when unknown.

        ``n`` tokens hold at most ``n * max_token_chars`` characters, so a longer text
        cannot fit in ``n`` tokens: a budget is checked before a huge text is tokenized.
        """
        get_vocab = getattr(self.tokenizer, "get_vocab", None)
        vocab = get_vocab() if callable(get_vocab) else None
        return max((len(entry.encode("utf-8")) for entry in vocab), default=None) if vocab else None

    def encode(self, text: str) -> list[int]:
        """Tokens of ``text`` without added BOS/EOS."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, tokens: Sequence[int]) -> str:
        """A sampled turn's text as the environment sees it (special tokens removed)."""
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def prompt_tokens(self, messages: Sequence[Message], tools: list[dict] | None = None) -> list[int]:
        """The first prompt: the conversation so far plus the assistant's generation prompt."""
        if not messages:
            raise TemplateError("cannot render an empty conversation")
        return self.encode(self._text(messages, generation_prompt=True, tools=tools))

    def continuation_tokens(
        self,
        history: Sequence[Message],
        new_messages: Sequence[Message],
        stopped: bool,
        tools: list[dict] | None = None,
    ) -> list[int]:
        """Tokens to append after a sampled assistant turn to show ``new_messages``.

        The conversation is rendered with a sentinel as the sampled turn's
        content; what the template writes after the sentinel (end of turn, the
        new messages, the next generation prompt) is the continuation. Earlier
        turns are never re-rendered, so templates that render a past turn
        differently from the latest one (Qwen3's think block) work too.
        ``stopped`` says whether the turn ended on a stop token, which is then
        already in the sequence and is not repeated.
        """
        turn = [*history, {"role": "assistant", "content": _SENTINEL}, *new_messages]
        text = self._text(turn, generation_prompt=True, tools=tools)
        if text.count(_SENTINEL) != 1:
            raise TemplateError("the chat template does not render an assistant turn's content verbatim")
        tail = text[text.index(_SENTINEL) + len(_SENTINEL) :]
        if stopped:
            tail = self._after_stop(tail)
        return self.encode(tail)

    def _after_stop(self, tail: str) -> str:
        """Drop the end-of-turn marker the model already sampled from the template's tail."""
        for marker in (self.tokenizer.eos_token, *getattr(self.tokenizer, "all_special_tokens", [])):
            if marker and tail.startswith(marker):
                return tail[len(marker) :]
        return tail

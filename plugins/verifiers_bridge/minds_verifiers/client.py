"""A verifiers Client whose model is one rollout's minds Conversation.

Classic verifiers environments call ``client.get_response(prompt, ...)`` with
the whole conversation so far. The first call renders it
(``Conversation.start``); later calls append only the messages the environment
added since the last reply (``Conversation.observe``). Each reply is sampled by
``Conversation.sample_turn`` with the run's sampling parameters, so the tokens
verifiers sees in ``Response.message.tokens`` are the tokens minds trains on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import verifiers as vf

from minds_core import EpisodeConversation, TokenBudgetExhausted
from minds_verifiers.messages import native_tool, plain_messages, split_tool_calls


@attrs.frozen
class SampledTurn:
    """One reply as sampled: its text, the token ids before it and its own ids and log-probs."""

    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    stopped: bool
    turn: int


def new_messages(known: Sequence[dict[str, Any]], prompt: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of ``prompt`` after the ``known`` conversation; an error if it is not an extension."""
    if len(prompt) <= len(known) or [m.get("role") for m in prompt[: len(known)]] != [m.get("role") for m in known]:
        raise ValueError(
            "the verifiers environment sent a prompt that does not extend the conversation so far "
            f"({len(known)} messages known, {len(prompt)} sent); minds trains on linear conversations only"
        )
    return list(prompt[len(known) :])


class ConversationClient(vf.Client):
    """Samples every reply of one rollout from the policy, token-exactly; one client per rollout."""

    def __init__(self, conversation: EpisodeConversation) -> None:
        super().__init__(conversation)

    def setup_client(self, config: vf.ClientConfig) -> Any:
        raise TypeError("ConversationClient wraps a minds Conversation and is never built from a ClientConfig")

    async def to_native_tool(self, tool: vf.Tool) -> dict[str, Any]:
        return native_tool(tool)

    async def to_native_prompt(self, messages: vf.Messages) -> tuple[list[dict[str, Any]], dict]:
        return plain_messages(messages), {}

    async def get_native_response(
        self,
        prompt: list[dict[str, Any]],
        model: str,
        sampling_args: vf.SamplingArgs,
        tools: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> SampledTurn:
        """Sample the next reply; the run's SamplingParams apply (``sampling_args`` is not used)."""
        conversation: EpisodeConversation = self.client
        if not conversation.tokens:
            conversation.tools = tools
            conversation.start(prompt)
        else:
            conversation.observe(new_messages(conversation.messages, prompt))
        start = len(conversation.tokens)
        try:
            text = await conversation.sample_turn()
        except TokenBudgetExhausted as exc:
            raise vf.OverlongPromptError(str(exc)) from exc
        return SampledTurn(
            text=text,
            prompt_ids=conversation.tokens[:start],
            completion_ids=conversation.tokens[start:],
            logprobs=conversation.logprobs[start:],
            stopped=conversation.last_stopped,
            turn=conversation.turns,
        )

    async def raise_from_native_response(self, response: SampledTurn) -> None:
        """Sampling failures already raised in ``get_native_response``."""

    async def from_native_response(self, response: SampledTurn) -> vf.Response:
        content, calls = split_tool_calls(response.text, response.turn)
        prompt_tokens, completion_tokens = len(response.prompt_ids), len(response.completion_ids)
        return vf.Response(
            id=f"minds-turn-{response.turn}",
            created=0,
            model="",
            usage=vf.Usage(
                prompt_tokens=prompt_tokens,
                reasoning_tokens=0,
                completion_tokens=completion_tokens,
                total_tokens=prompt_tokens + completion_tokens,
            ),
            message=vf.ResponseMessage(
                content=content,
                tool_calls=[vf.ToolCall(**call) for call in calls] or None,
                finish_reason="tool_calls" if calls else ("stop" if response.stopped else "length"),
                is_truncated=not response.stopped,
                tokens=vf.ResponseTokens(
                    prompt_ids=response.prompt_ids,
                    prompt_mask=[0] * prompt_tokens,
                    completion_ids=response.completion_ids,
                    completion_mask=[1] * completion_tokens,
                    completion_logprobs=response.logprobs,
                ),
            ),
        )

    async def close(self) -> None:
        """Nothing to release: the conversation belongs to the rollout."""

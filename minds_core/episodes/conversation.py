"""A token-exact conversation between the policy and an environment.

The sequence grows by observations (rendered prompt and environment replies,
never trained on) and sampled turns (trained on, each with its own mask and the
sampler's log-probabilities).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import attrs
import tinker

from minds_core.base.tracing import span
from minds_core.contract.environment import Message, SampledTurn, StopCondition, TokenBudgetExhausted
from minds_core.envs.render import Renderer
from minds_core.inference.capture import TokenSequence
from minds_core.inference.sampling import turn_seed


class StopReason(enum.StrEnum):
    """Why a sampled turn ended (``tinker.types.StopReason``); str-valued, so JSON holds the plain word."""

    #: a stop token (the turn is complete)
    STOP = "stop"
    #: its max_tokens (the reply was cut off)
    LENGTH = "length"

    @classmethod
    def of(cls, reason: object) -> StopReason:
        """A sampler's stop reason: anything but a stop token counts as cut off at its length."""
        return cls.STOP if reason == cls.STOP else cls.LENGTH


@attrs.define
class Conversation:
    """Messages and the exact token sequence of one rollout (an ``EpisodeConversation``).

    ``tokens[i]`` was sampled when ``sampled[i]``; then ``logprobs[i]`` is the
    sampler's log-probability of it and ``turn_ids[i]`` numbers the sampled turn.
    ``replies`` holds the decoded text of each sampled turn and
    ``stop_reasons`` why each ended; ``turns`` and ``last_stopped`` are read from them.

    ``tokens`` is usually one sequence. A token-level episode (``observe_tokens``) whose next
    observation does not extend the sequence so far starts another: ``starts`` holds where each
    sequence begins in ``tokens`` (``[0]`` for one), each is trained as a datum of its own, and
    only the last is the context of the next sample and measured against ``max_total_tokens``.
    ``record`` is what a bridging episode keeps of the rollout (a tinker-cookbook ``Trajectory``); it
    travels back with the rollout from a cluster worker.
    """

    renderer: Renderer
    sampler: Any
    params: tinker.types.SamplingParams
    max_total_tokens: int
    max_turns: int = 0  # 0 = no limit (max_total_tokens still ends the conversation)
    tools: list[dict] | None = None
    messages: list[Message] = attrs.field(factory=list)
    tokens: list[int] = attrs.field(factory=list)
    sampled: list[bool] = attrs.field(factory=list)
    logprobs: list[float] = attrs.field(factory=list)
    turn_ids: list[int] = attrs.field(factory=list)
    replies: list[str] = attrs.field(factory=list)
    stop_reasons: list[StopReason] = attrs.field(factory=list)
    prompt: list[Message] = attrs.field(factory=list)
    truncated: bool = False
    starts: list[int] = attrs.field(factory=lambda: [0])
    record: Any = None

    def _extend(self, tokens: Sequence[int], logprobs: Sequence[float] | None = None) -> None:
        self.tokens.extend(tokens)
        self.sampled.extend([logprobs is not None] * len(tokens))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(tokens))
        self.turn_ids.extend([self.turns if logprobs is not None else -1] * len(tokens))

    def _check_room(self, messages: Sequence[Message], what: str) -> None:
        """A TokenBudgetExhausted (the conversation ends truncated) when ``messages`` cannot fit, known before tokenizing.

        A text of ``c`` characters needs at least ``c / max_token_chars`` tokens, so a
        huge observation is refused without tokenizing it.
        """
        per_token = self.renderer.max_token_chars
        room = self.max_total_tokens - len(self.context)
        chars = sum(_content_chars(m) for m in messages)
        if per_token and chars > room * per_token:
            self.truncated = True
            raise TokenBudgetExhausted(
                f"{what} of {chars:,} characters cannot fit in the {room:,} tokens left of max_total_tokens={self.max_total_tokens} "
                f"(a token holds at most {per_token} characters); it was not tokenized"
            )

    def start(self, messages: Sequence[Message]) -> None:
        """Render the first prompt."""
        self._check_room(messages, "the initial observation")
        self.prompt = list(messages)
        self.messages = list(messages)
        self._extend(self.renderer.prompt_tokens(self.messages, self.tools))

    def observe(self, messages: Sequence[Message]) -> None:
        """Append the environment's reply and open the next assistant turn."""
        if not messages:
            raise ValueError("an episode that is not done must return the messages of its reply")
        self._check_room(messages, "the environment's reply")
        history = self.messages[:-1]  # without the assistant turn just sampled
        self._extend(self.renderer.continuation_tokens(history, messages, self.last_stopped, self.tools))
        self.messages.extend(messages)

    async def sample_turn(self) -> str:
        """Sample one assistant turn from the policy, record it, return its text."""
        return (await self.sample_tokens(None)).text

    async def sample_tokens(self, stop: StopCondition) -> SampledTurn:
        """Sample one turn from the policy after the current sequence, ending at ``stop`` (None: the
        run's sampling settings; token ids or strings: these), record it and return it."""
        room = self.max_total_tokens - len(self.context)
        if room <= 0 or 0 < self.max_turns <= self.turns:
            self.truncated = True
            raise TokenBudgetExhausted(
                f"{len(self.context)} tokens of max_total_tokens={self.max_total_tokens}, "
                f"{self.turns} turns of max_turns={self.max_turns}"
            )
        update: dict[str, Any] = {"max_tokens": min(self.params.max_tokens or room, room), "seed": turn_seed(self.params.seed, self.turns)}
        if stop is not None:
            update["stop"] = list(stop)
        params = self.params.model_copy(update=update)
        with span("sample", prompt_tokens=len(self.context), turn=self.turns) as sampling:
            response = await self.sampler.sample(tinker.types.ModelInput.from_ints(self.context), 1, params)
            sequence = response.sequences[0]
            if sampling is not None:
                sampling.set(sampled_tokens=len(sequence.tokens))
        if len(sequence.tokens) != len(sequence.logprobs or []):
            raise ValueError("the sampler returned tokens without one log-probability each")
        self._extend(sequence.tokens, sequence.logprobs)
        reason = StopReason.of(sequence.stop_reason)
        self.stop_reasons.append(reason)
        text = self.renderer.decode(sequence.tokens)
        self.replies.append(text)
        self.messages.append({"role": "assistant", "content": text})
        return SampledTurn(list(sequence.tokens), list(sequence.logprobs or []), reason, text)

    def start_tokens(self, tokens: Sequence[int]) -> None:
        """Open the conversation with an already rendered prompt (a token-level episode's first observation)."""
        if self.tokens:
            raise ValueError("start_tokens opens an empty conversation")
        self._token_observation(tokens, "the initial observation")

    def observe_tokens(self, tokens: Sequence[int]) -> None:
        """The next observation as the full context to sample after (tinker-cookbook's ``next_observation``).

        When it starts with the current sequence, only what it adds is appended (never trained on);
        otherwise it starts a new sequence (``starts``), as the cookbook then starts a new datum.
        Raises TokenBudgetExhausted when it leaves no room under ``max_total_tokens``.
        """
        tokens = list(tokens)
        current = self.context
        if tokens[: len(current)] == current:
            self._token_observation(tokens[len(current) :], "the environment's reply", len(tokens))
            return
        self.starts.append(len(self.tokens))
        self._token_observation(tokens, "the next observation")

    def _token_observation(self, tokens: Sequence[int], what: str, length: int | None = None) -> None:
        length = len(tokens) if length is None else length
        if length >= self.max_total_tokens:
            self.truncated = True
            raise TokenBudgetExhausted(f"{what} makes {length:,} tokens, no room under max_total_tokens={self.max_total_tokens}")
        self._extend(tokens)
        text = self.renderer.decode(list(tokens)) if tokens else ""
        message = {"role": "observation", "content": text}
        if not self.prompt:
            self.prompt = [message]
        self.messages.append(message)

    @property
    def context(self) -> list[int]:
        """The current sequence: what the next turn is sampled after."""
        return self.tokens[self.starts[-1] :]

    def spans(self) -> list[tuple[int, int]]:
        """(begin, end) in ``tokens`` of each sequence, in order (one, unless a token-level episode started more)."""
        ends = [*self.starts[1:], len(self.tokens)]
        return list(zip(self.starts, ends))

    def adopt(self, sequences: Sequence[TokenSequence], stop_reasons: Sequence[object], replies: Sequence[str]) -> None:
        """Take an episode's captured calls as the rollout (``inference.capture.trajectory``): each sequence becomes
        one of this conversation's (``spans``), trained as a datum of its own; one stop reason and reply per call."""
        if self.tokens:
            raise ValueError("adopt() takes captured calls as the whole rollout: the conversation must be empty")
        turn = -1
        for number, sequence in enumerate(sequences):
            if number:
                self.starts.append(len(self.tokens))
            for i, (token, was_sampled, logprob) in enumerate(zip(sequence.tokens, sequence.sampled, sequence.logprobs)):
                turn += bool(was_sampled and (i == 0 or not sequence.sampled[i - 1]))
                self.tokens.append(token)
                self.sampled.append(was_sampled)
                self.logprobs.append(logprob)
                self.turn_ids.append(turn if was_sampled else -1)
        self.stop_reasons.extend(StopReason.of(reason) for reason in stop_reasons)
        self.replies.extend(replies)

    def sequences(self) -> list[TokenSequence]:
        """Every sequence the rollout trains on, in order (``spans``)."""
        return [
            TokenSequence(tuple(self.tokens[b:e]), tuple(self.sampled[b:e]), tuple(self.logprobs[b:e])) for b, e in self.spans()
        ]

    @property
    def turns(self) -> int:
        """How many turns were sampled."""
        return len(self.stop_reasons)

    @property
    def last_stopped(self) -> bool:
        """Whether the last sampled turn ended on a stop token (True before any turn)."""
        return not self.stop_reasons or self.stop_reasons[-1] == StopReason.STOP

    @property
    def sampled_tokens(self) -> int:
        """Sampled tokens of every sequence."""
        return sum(self.sampled)


def _content_chars(message: Message) -> int:
    """Characters of a message's text content (string or text parts); what the template adds is not counted."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(part["text"]) for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return 0

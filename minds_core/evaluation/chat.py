"""Talking to a trained adapter: one-shot samples and an interactive chat, on any backend.

Messages are rendered with the model's chat template (and the run's
``model.chat_template_args``), exactly as rollouts are; replies are the
decoded sampled tokens.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

import attrs
import tinker

from minds_core.base.errors import UsageError, utf8_problem
from minds_core.contract.environment import Message
from minds_core.envs.render import Renderer, TemplateError
from minds_core.inference.sampling import turn_seed
from minds_core.report.page import printable

#: Service errors that mean this request (not the session) was wrong, e.g. a prompt over the context length.
REQUEST_ERRORS = (tinker.BadRequestError, tinker.UnprocessableEntityError)


@attrs.frozen
class Reply:
    """One sampled reply: its text, token count, why it stopped and its total log-probability."""

    text: str
    tokens: int
    stop_reason: str
    logprob: float


@attrs.define
class ChatModel:
    """A sampling client, the renderer of its tokenizer and the sampling settings."""

    sampler: Any
    renderer: Renderer
    params: tinker.types.SamplingParams
    #: a sample request's result from its future (``ServiceLifetime.result``: given up once the service is lost)
    wait: Callable[[Any], Any] = lambda future: future.result()

    @classmethod
    def create(
        cls, sampler: Any, base_model: str, template_args: dict[str, Any], params: tinker.types.SamplingParams,
        wait: Callable[[Any], Any] | None = None,
    ) -> ChatModel:  # fmt: skip
        from minds_core.backends import sampler_tokenizer

        try:
            renderer = Renderer(sampler_tokenizer(sampler, base_model), template_args)
            return cls(sampler, renderer, params, *([wait] if wait is not None else []))
        except TemplateError as exc:
            raise UsageError(f"cannot chat with this model: {exc}") from None

    def reply(self, messages: list[Message], n: int = 1) -> list[Reply]:
        """``n`` sampled assistant replies to ``messages``, seeded as a rollout's turn (``turn_seed``) when seeded."""
        prompt = tinker.types.ModelInput.from_ints(self.renderer.prompt_tokens(messages))
        turn = sum(message["role"] == "assistant" for message in messages)
        params = self.params.model_copy(update={"seed": turn_seed(self.params.seed, turn)})
        response = self.wait(self.sampler.sample(prompt, n, params))
        return [
            Reply(
                text=self.renderer.decode(seq.tokens),
                tokens=len(seq.tokens),
                stop_reason=str(seq.stop_reason),
                logprob=float(sum(seq.logprobs or [])),
            )
            for seq in response.sequences
        ]


def opening(system: str | None) -> list[Message]:
    """The conversation before the first user turn."""
    return [{"role": "system", "content": system}] if system else []


def chat_loop(model: ChatModel, system: str | None, stdin: TextIO, stdout: TextIO, read: Callable[[str], str] | None = None) -> int:
    """Read user turns until EOF or ``/exit``; ``/reset`` starts over. Returns the number of replies.

    ``read`` (``input`` on a terminal) shows a prompt and reads a line; without it,
    lines come from ``stdin`` (a pipe). Replies go to ``stdout`` after ``assistant> ``.
    A rejected turn (e.g. the conversation outgrew the context) is reported and dropped.
    """
    messages = opening(system)
    replies = 0
    print("chat: /reset starts over, /exit or Ctrl-D quits", file=sys.stderr)
    while True:
        try:
            line = read("you> ") if read else stdin.readline()
        except EOFError:
            break
        if not read and not line:
            break
        text = line.rstrip("\n")
        if not text.strip():
            continue
        if text.strip() == "/exit":
            break
        if text.strip() == "/reset":
            messages = opening(system)
            print("chat: conversation cleared", file=sys.stderr)
            continue
        if wrong := utf8_problem(text):
            print(f"chat: this line is {wrong}; nothing was sent", file=sys.stderr)
            continue
        messages.append({"role": "user", "content": text})
        try:
            (reply,) = model.reply(messages)
        except REQUEST_ERRORS as exc:
            messages.pop()
            print(f"chat: the service rejected this turn ({exc}); /reset to start over", file=sys.stderr)
            continue
        messages.append({"role": "assistant", "content": reply.text})
        print(f"assistant> {printable(reply.text)}", file=stdout, flush=True)  # control bytes shown, not obeyed
        replies += 1
    return replies

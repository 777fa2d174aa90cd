"""LLM-as-judge rewards: ask a judge model a rubric question about each completion and parse its score.

Registered as ``minds.judge``; a rubric entry's ``args`` build one judge:

```toml
[[env.extra_rewards]]
name = "minds.judge"
weight = 1.0
args = { question = "Is the reply polite?", model = "Qwen/Qwen3-8B" }
```

- ``question``: the rubric question shown to the judge with the prompt and reply.
- ``model``: on the training service, a base model name or a ``tinker://``
  sampler checkpoint (default: the policy's base model); with ``base_url``,
  the model name the endpoint serves.
- ``base_url``: an OpenAI-compatible endpoint (``POST {base_url}/chat/completions``)
  instead of the service; ``api_key_env`` names the environment variable
  holding its key (sent as a Bearer token, never logged or written).
- ``max_concurrency`` (8): judge requests in flight at once, per judge.
- ``max_score`` (10): the judge answers ``Score: N`` with ``0 <= N <= max_score``;
  the reward is ``N / max_score``.
- ``max_tokens`` (64), ``timeout`` (60 s per request).

Verdicts are cached per (prompt, completion). A failed request or a reply
without a valid score is a failure: logged, counted in the rollout metric
``judge/failed`` (``judge/calls`` and ``judge/cached`` count the rest) and
returned as no number, so the rubric counts an invalid reward part
(``rollout.invalid_reward = "fail"`` fails the rollout instead of scoring it 0).
"""

from __future__ import annotations

import asyncio
import os
import re
import weakref
from typing import Any

from minds_core.base.logs import get_logger
from minds_core.base.tracing import span
from minds_core.contract.environment import Context, Message
from minds_core.envs.render import Renderer
from minds_core.envs.single_turn import report_metric

log = get_logger("judge")

_SCORE = re.compile(r"score\s*[:=]\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)


class JudgeError(Exception):
    """The judge gave no usable verdict."""


def parse_score(reply: str, max_score: float) -> float:
    """The last ``Score: N`` of the reply as ``N / max_score``; a JudgeError when there is none in range."""
    found = _SCORE.findall(reply)
    if not found:
        raise JudgeError(f"no 'Score: N' in the judge's reply {reply[:120]!r}")
    value = float(found[-1])
    if not 0 <= value <= max_score:
        raise JudgeError(f"score {value:g} is outside 0..{max_score:g}")
    return value / max_score


def _as_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m.get('role', '?')}: {m.get('content', '')}" for m in prompt or [])


class LLMJudge:
    """A reward function scoring ``(prompt, completion)`` with a judge model (see the module docs)."""

    def __init__(
        self,
        question: str,
        model: str = "",
        base_url: str = "",
        api_key_env: str = "",
        max_concurrency: int = 8,
        max_score: float = 10.0,
        max_tokens: int = 64,
        timeout: float = 60.0,
    ) -> None:
        if not question.strip():
            raise ValueError("args.question is empty: give the rubric question the judge answers")
        if base_url and not model:
            raise ValueError("args.base_url needs args.model, the name the endpoint serves")
        if api_key_env and api_key_env not in os.environ:
            raise ValueError(f"args.api_key_env names {api_key_env!r}, which is not set in the environment")
        if max_concurrency < 1 or max_score <= 0 or max_tokens < 1 or timeout <= 0:
            raise ValueError("args.max_concurrency, max_tokens must be >= 1; max_score and timeout > 0")
        self.question, self.model, self.base_url, self.api_key_env = question, model, base_url.rstrip("/"), api_key_env
        self.max_concurrency, self.max_score, self.max_tokens, self.timeout = max_concurrency, max_score, max_tokens, timeout
        self.cache: dict[tuple[str, str], float] = {}
        self.calls = self.failures = 0
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[asyncio.Semaphore, asyncio.Lock]] = weakref.WeakKeyDictionary()
        self._service: tuple[Any, Any, Renderer] | None = None

    def messages(self, prompt: Any, completion: str) -> list[Message]:
        """What the judge is asked about one reply."""
        return [
            {"role": "system", "content": "You grade replies. Think briefly, then end with one line 'Score: N'."},
            {
                "role": "user",
                "content": f"{self.question}\n\nPrompt:\n{_as_text(prompt)}\n\nReply:\n{completion}\n\n"
                f"Answer with 'Score: N', N from 0 to {self.max_score:g}.",
            },
        ]

    async def __call__(self, prompt: Any, completion: str, state: dict[str, Any], ctx: Context) -> float | None:
        key = (_as_text(prompt), completion)
        if key in self.cache:
            report_metric(state, "judge/cached", 1)
            return self.cache[key]
        limit, lock = self._loop_state()
        async with limit:
            self.calls += 1
            report_metric(state, "judge/calls", 1)
            try:
                messages = self.messages(prompt, completion)
                asking = self._ask_endpoint(messages) if self.base_url else self._ask_service(messages, ctx, lock)
                with span("judge", model=self.model or ctx.base_model):
                    score = parse_score(await asyncio.wait_for(asking, self.timeout), self.max_score)
            except Exception as exc:  # noqa: BLE001 - a judge failure is counted, never scored 0
                self.failures += 1
                report_metric(state, "judge/failed", 1)
                reason = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
                log.warning("judge failed", model=self.model or ctx.base_model, error=reason[:300])
                return None
        self.cache[key] = score
        return score

    def _loop_state(self) -> tuple[asyncio.Semaphore, asyncio.Lock]:
        loop = asyncio.get_running_loop()
        if loop not in self._loops:
            self._loops[loop] = (asyncio.Semaphore(self.max_concurrency), asyncio.Lock())
        return self._loops[loop]

    async def _ask_service(self, messages: list[Message], ctx: Context, lock: asyncio.Lock) -> str:
        async with lock:  # one sampling client per service, created by the first request
            if self._service is None or self._service[0] is not ctx.service:
                model = self.model or ctx.base_model
                where = {"model_path": model} if "://" in model else {"base_model": model}
                sampler = await ctx.service.create_sampling_client(**where)
                self._service = (ctx.service, sampler, Renderer(sampler.get_tokenizer()))
        import tinker

        _, sampler, renderer = self._service
        params = tinker.types.SamplingParams(max_tokens=self.max_tokens, temperature=0.0)
        response = await sampler.sample(tinker.types.ModelInput.from_ints(renderer.prompt_tokens(messages)), 1, params)
        return renderer.decode(response.sequences[0].tokens)

    async def _ask_endpoint(self, messages: list[Message]) -> str:
        import httpx

        headers = {"Authorization": f"Bearer {os.environ[self.api_key_env]}"} if self.api_key_env else {}
        body = {"model": self.model, "messages": messages, "max_tokens": self.max_tokens, "temperature": 0.0}
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            response = await client.post(f"{self.base_url}/chat/completions", json=body, headers=headers)
        if response.status_code != 200:
            raise JudgeError(f"{self.base_url}/chat/completions answered HTTP {response.status_code}: {response.text[:200]}")
        return str(response.json()["choices"][0]["message"]["content"])

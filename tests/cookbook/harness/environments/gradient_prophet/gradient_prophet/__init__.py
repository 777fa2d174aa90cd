"""gradient_prophet as the seed harness had it: a builder whose ``build(sampling_client)`` lists cookbook ``Env``s.

The model predicts how a lesson placed before a probe shifts its own log-probability of the probe's
answer (``in_context``): reply a JSON array with one number; reward 1 / (1 + (true - predicted)^2),
the truth measured with the sampler ``build`` was given (``compute_logprobs_async``).
"""

from __future__ import annotations

import json
import random
import re

import tinker
from tinker_cookbook import renderers
from tinker_cookbook.rl.types import Env, StepResult

SETS = [
    ("What colour is the sky on Mars?", "butterscotch", "What colour is the sky?", "blue"),
    ("How many legs does a spider have?", "six", "How many legs does an ant have?", "six"),
    ("What is the capital of Australia?", "Sydney", "What is the capital of Canada?", "Ottawa"),
    ("What do bees make?", "wax only", "What do cows give?", "milk"),
    ("Which planet is largest?", "Saturn", "Which planet is closest to the sun?", "Mercury"),
    ("What is 7 times 8?", "54", "What is 2 plus 2?", "4"),
]
SYSTEM = "Reply with a JSON array holding one number: how much the lesson changes your log-probability of the answer."


def prior_prompt(probe: str) -> str:
    return f"{probe}\nAnswer:"


def lesson_prompt(lesson_q: str, lesson_a: str, probe: str) -> str:
    return f"Lesson: {lesson_q}\nLesson Answer: {lesson_a}\n\n{probe}\nAnswer:"


def parse_prediction(text: str) -> float:
    """The first number of the reply's JSON array; 0 when there is none."""
    match = re.search(r"\[[^\]]*\]", text)
    try:
        values = json.loads(match.group(0)) if match else []
        return float(values[0]) if values else 0.0
    except (ValueError, TypeError, IndexError):
        return 0.0


class GradientProphetEnv(Env):
    def __init__(self, item: tuple[str, str, str, str], sampling_client, renderer_name: str, tokenizer=None) -> None:
        self.item = item
        self.sampling_client = sampling_client
        self.renderer_name = renderer_name
        self.tokenizer = tokenizer  # None: the sampler's

    def _tokenizer(self):
        return self.tokenizer or self.sampling_client.get_tokenizer()

    def _renderer(self) -> renderers.Renderer:
        return renderers.get_renderer(self.renderer_name, self._tokenizer())

    async def initial_observation(self):
        lesson_q, lesson_a, probe, target = self.item
        renderer = self._renderer()
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Lesson: {lesson_q} -> {lesson_a}\nProbe: {probe} -> {target}"},
        ]
        return renderer.build_generation_prompt(messages), renderer.get_stop_sequences()

    async def _logprob(self, prompt: str) -> float:
        tokenizer = self._tokenizer()
        context = tokenizer.encode(prompt, add_special_tokens=False)
        answer = tokenizer.encode(" " + self.item[3], add_special_tokens=False)
        logprobs = await self.sampling_client.compute_logprobs_async(tinker.ModelInput.from_ints(context + answer))
        return sum(logprobs[len(context) :])

    async def true_delta(self) -> float:
        lesson_q, lesson_a, probe, _ = self.item
        return await self._logprob(lesson_prompt(lesson_q, lesson_a, probe)) - await self._logprob(prior_prompt(probe))

    async def step(self, action, *, extra=None) -> StepResult:
        message, _ = self._renderer().parse_response(action)
        predicted = parse_prediction(renderers.get_text_content(message))
        truth = await self.true_delta()
        reward = 1.0 / (1.0 + (truth - predicted) ** 2)
        return StepResult(
            reward=reward,
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=[],
            metrics={"delta_true": truth, "delta_pred": predicted},
        )


class GradientProphetBuilder:
    """What ``load_environment`` returns: the items, built into envs with the trainer's sampler."""

    def __init__(self, items: list, renderer_name: str) -> None:
        self.items = items
        self.renderer_name = renderer_name

    def build(self, sampling_client) -> list[GradientProphetEnv]:
        return [GradientProphetEnv(item, sampling_client, self.renderer_name) for item in self.items]


def load_environment(num_examples: int = 6, seed: int = 0, renderer_name: str = "qwen3") -> GradientProphetBuilder:
    items = list(SETS)
    random.Random(seed).shuffle(items)
    return GradientProphetBuilder(items[:num_examples], renderer_name)

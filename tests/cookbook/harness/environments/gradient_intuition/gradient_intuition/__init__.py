"""gradient_intuition as the seed harness had it: a cookbook ``Env`` that also predicts one gradient step's effect.

The prompt is a ghost_trace question plus the meta-task: predict how much ONE supervised step on
your own answer changes logP(probe target | probe question). Output ``PREDICTION: <float>`` then
``ANSWER: <answer>``. Reward = R_inner + alpha * max(0, 1 - |prediction - delta|), R_inner being
1 for the right answer; no answer parsed: 0. The delta is measured with a SHADOW training client
the env makes itself with ``tinker.ServiceClient()`` (a new adapter on the base model per step).
"""

from __future__ import annotations

import re

import tinker
from environments.ghost_trace.ghost_trace import build_dataset
from tinker_cookbook import renderers
from tinker_cookbook.rl.types import Env, StepResult

PROBE = ("What is the capital of Italy?", "Rome")
META = (
    "Also predict how much one training step on your answer changes your log-probability of 'Rome' after "
    "'What is the capital of Italy?'.\nPREDICTION: <number>\nANSWER: <answer>"
)


def parse(text: str) -> tuple[float | None, str | None]:
    prediction = re.search(r"PREDICTION:\s*(-?\d+(?:\.\d+)?)", text)
    answer = re.search(r"ANSWER:\s*(.+)", text)
    return (float(prediction.group(1)) if prediction else None), (answer.group(1).strip() if answer else None)


def _datum(tokens: list[int], weights: list[float]) -> tinker.Datum:
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights[1:]},
    )


async def shadow_delta(base_model: str, tokenizer, trained_text: str, rank: int = 8, lr: float = 1e-4) -> float:
    """logP(probe answer) after one cross-entropy step on ``trained_text``, less before, on a new shadow adapter."""
    service = tinker.ServiceClient()
    shadow = await service.create_lora_training_client_async(base_model=base_model, rank=rank)
    question = tokenizer.encode(PROBE[0] + " ", add_special_tokens=False)
    target = tokenizer.encode(PROBE[1], add_special_tokens=False)
    probe = _datum(question + target, [0.0] * len(question) + [1.0] * len(target))

    async def probe_logprob() -> float:
        out = await (await shadow.forward_async([probe], "cross_entropy"))
        logprobs = out.loss_fn_outputs[0]["logprobs"].tolist()
        return sum(logprobs[len(question) - 1 :])

    before = await probe_logprob()
    tokens = tokenizer.encode(trained_text, add_special_tokens=False)
    await (await shadow.forward_backward_async([_datum(tokens, [1.0] * len(tokens))], "cross_entropy"))
    await (await shadow.optim_step_async(tinker.AdamParams(learning_rate=lr)))
    return await probe_logprob() - before


class GradientIntuitionEnv(Env):
    def __init__(self, question: str, answer: str, renderer: renderers.Renderer, base_model: str, alpha: float) -> None:
        self.question, self.answer = question, answer
        self.renderer, self.base_model, self.alpha = renderer, base_model, alpha

    async def initial_observation(self):
        messages = [{"role": "user", "content": f"{self.question}\n{META}"}]
        return self.renderer.build_generation_prompt(messages), self.renderer.get_stop_sequences()

    async def step(self, action, *, extra=None) -> StepResult:
        message, _ = self.renderer.parse_response(action)
        text = renderers.get_text_content(message)
        prediction, answer = parse(text)
        delta = await shadow_delta(self.base_model, self.renderer.tokenizer, self.question + " " + text)
        inner = float(answer is not None and answer.lower() == self.answer.lower())
        reward = 0.0 if answer is None else inner + (0.0 if prediction is None else self.alpha * max(0.0, 1 - abs(prediction - delta)))
        return StepResult(
            reward=reward, episode_done=True, next_observation=tinker.ModelInput.empty(), next_stop_condition=[],
            metrics={"delta_true": delta, "inner": inner},
        )  # fmt: skip


class GradientIntuitionBuilder:
    """What ``load_environment`` returns: ``build(sampling_client)`` lists one env per question."""

    def __init__(self, rows: list[dict], base_model: str, renderer_name: str, alpha: float) -> None:
        self.rows, self.base_model, self.renderer_name, self.alpha = rows, base_model, renderer_name, alpha

    def build(self, sampling_client) -> list[GradientIntuitionEnv]:
        return [GradientIntuitionLazyEnv(row, sampling_client, self) for row in self.rows]


class GradientIntuitionLazyEnv(GradientIntuitionEnv):
    """Its renderer is made from the sampler's tokenizer when the episode starts."""

    def __init__(self, row: dict, sampling_client, builder: GradientIntuitionBuilder) -> None:
        self.row, self.sampling_client, self.builder = row, sampling_client, builder

    async def initial_observation(self):
        renderer = renderers.get_renderer(self.builder.renderer_name, self.sampling_client.get_tokenizer())
        GradientIntuitionEnv.__init__(self, self.row["question"], self.row["answer"], renderer, self.builder.base_model, self.builder.alpha)
        return await super().initial_observation()


def load_environment(
    num_examples: int = 6, seed: int = 0, base_model: str = "Qwen/Qwen3-8B", renderer_name: str = "qwen3", alpha: float = 0.35
) -> GradientIntuitionBuilder:
    rows = [dict(row) for row in build_dataset(num_examples, seed)]
    return GradientIntuitionBuilder(rows, base_model, renderer_name, alpha)

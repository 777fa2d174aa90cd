"""The harness's RL datasets: EnvGroupBuilders of each environment, and one RLDataset mixing them.

A group's envs sample their ground truth from the BASE model (``tinker.ServiceClient()``'s sampling
client, made when the group's envs are), as the seed's later version did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tinker
from environments.ghost_trace import ghost_trace
from environments.gradient_intuition.gradient_intuition import GradientIntuitionEnv
from environments.gradient_prophet.gradient_prophet import SETS, GradientProphetEnv
from tinker_cookbook import renderers, tokenizer_utils
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, RLDataset, StepResult


class GhostTraceEnv(Env):
    def __init__(self, row: dict, renderer: renderers.Renderer) -> None:
        self.row, self.renderer = row, renderer

    async def initial_observation(self):
        return self.renderer.build_generation_prompt(self.row["prompt"]), self.renderer.get_stop_sequences()

    async def step(self, action, *, extra=None) -> StepResult:
        message, _ = self.renderer.parse_response(action)
        reward = ghost_trace.score(renderers.get_text_content(message), self.row["answer"])
        return StepResult(reward=reward, episode_done=True, next_observation=tinker.ModelInput.empty(), next_stop_condition=[])


class TaskGroupBuilder(EnvGroupBuilder):
    def __init__(self, make_env: Callable[[], Env], group_size: int, tag: str) -> None:
        self.make_env, self.group_size, self.tag = make_env, group_size, tag

    async def make_envs(self) -> Sequence[Env]:
        return [self.make_env() for _ in range(self.group_size)]

    def logging_tags(self) -> list[str]:
        return [self.tag]


class MixedDataset(RLDataset):
    def __init__(self, builders: list[EnvGroupBuilder], batch_size: int) -> None:
        self.builders, self.batch_size = builders, batch_size

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return self.builders[index * self.batch_size : (index + 1) * self.batch_size]

    def __len__(self) -> int:
        return len(self.builders) // self.batch_size


class BaseSampler:
    """The base model's sampling client, made on first use."""

    def __init__(self, base_model: str) -> None:
        self.base_model, self._client = base_model, None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._client is None:
            self._client = tinker.ServiceClient().create_sampling_client(base_model=self.base_model)
        return getattr(self._client, name)


def load_environment(
    tasks: Sequence[str] = ("ghost_trace", "gradient_prophet", "gradient_intuition"),
    base_model: str = "Qwen/Qwen3-8B",
    renderer_name: str = "qwen3",
    group_size: int = 4,
    batch_size: int = 3,
    num_examples: int = 4,
) -> MixedDataset:
    tokenizer = tokenizer_utils.get_tokenizer(base_model)
    renderer = renderers.get_renderer(renderer_name, tokenizer)
    sampler = BaseSampler(base_model)
    rows = [dict(row) for row in ghost_trace.build_dataset(num_examples)]
    makers: dict[str, list[Callable[[], Env]]] = {
        "ghost_trace": [lambda row=row: GhostTraceEnv(row, renderer) for row in rows],
        "gradient_prophet": [lambda item=item: GradientProphetEnv(item, sampler, renderer_name, tokenizer) for item in SETS[:num_examples]],
        "gradient_intuition": [
            lambda row=row: GradientIntuitionEnv(row["question"], row["answer"], renderer, base_model, 0.35) for row in rows
        ],
    }
    builders = [TaskGroupBuilder(make, group_size, task) for i in range(num_examples) for task in tasks for make in [makers[task][i]]]
    return MixedDataset(builders, batch_size)

"""A tinker-cookbook user's script: the cookbook's own SFT or RL loop, unmodified, on data built here.

    python cookbook_driver.py sft|rl|rl-stable|rl-async LOG_PATH [--crash-at-batch N] [--in-process ROOT]

Through ``minds serve`` it finds the service as any Tinker program does (``TINKER_BASE_URL``,
``TINKER_API_KEY``). With ``--in-process ROOT`` the SDK's ``tinker.ServiceClient`` is minds' local
backend on checkpoint root ``ROOT`` (the cookbook calls ``tinker.ServiceClient(...)``, and nothing else
changes). The tiny model's tokenizer is registered under its name with the cookbook's own
``register_tokenizer``, and the cookbook's price list (a download) is answered "unavailable", as
offline: nothing here reaches beyond 127.0.0.1.

- ``sft``: ``supervised.train.main`` on 12 chat examples (the cookbook's ``role_colon`` renderer,
  ``conversation_to_datum``), 6 steps of 2, periodic saves every 2 steps and rolling saves every
  step (saved with ttls, the rolling ones deleted). ``--crash-at-batch N`` makes ``get_batch(N)``
  raise, as a process dying mid-run; running again resumes from the last checkpoint.
- ``rl`` (``importance_sampling``), ``rl-stable`` (``stable_reinforce``, math_rl's loss) and
  ``rl-async`` (``AsyncConfig``'s default, ``stable_reinforce``, one step off policy):
  ``rl.train.main`` on 3 batches of 2 groups of 4 two-turn episodes whose prompt grows each turn
  (the last action and a new user line are appended); each turn's reward is the share of the
  action's tokens that are lowercase letters.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
from collections.abc import Sequence

import chz
import tinker
from tinker_cookbook import renderers, tokenizer_utils
from tinker_cookbook.rl import train as rl_train
from tinker_cookbook.rl.types import (
    Env,
    EnvGroupBuilder,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
)
from tinker_cookbook.supervised import train as sft_train
from tinker_cookbook.supervised.data import conversation_to_datum
from tinker_cookbook.supervised.types import SupervisedDataset, SupervisedDatasetBuilder
from tinker_cookbook.utils import cost_estimation
from transformers import AutoTokenizer

from minds_core.backends.local import ServiceClient as LocalServiceClient
from minds_core.backends.local.model.tiny_model import TINY_MODEL as TINY_MODEL
from minds_core.backends.local.model.tiny_model import tiny_model_path

MODEL = TINY_MODEL
RENDERER = "role_colon"
LOWERCASE = frozenset(range(ord("a"), ord("z") + 1))


class ChatExamples(SupervisedDataset):
    """Batches of SFT datums, in order; ``get_batch(crash_at)`` raises, as a run dying midway."""

    def __init__(self, data: list[tinker.Datum], batch_size: int, crash_at: int | None) -> None:
        self.data, self.batch_size, self.crash_at = data, batch_size, crash_at

    def get_batch(self, index: int) -> list[tinker.Datum]:
        if index == self.crash_at:
            raise RuntimeError(f"simulated crash at batch {index}")
        return self.data[index * self.batch_size : (index + 1) * self.batch_size]

    def __len__(self) -> int:
        return len(self.data) // self.batch_size

    def set_epoch(self, seed: int = 0) -> None:
        """One fixed order."""


@chz.chz
class ChatExamplesBuilder(SupervisedDatasetBuilder):
    crash_at: int | None = None

    def __call__(self) -> tuple[SupervisedDataset, SupervisedDataset | None]:
        renderer = renderers.get_renderer(RENDERER, tokenizer_utils.get_tokenizer(MODEL))
        capitals = ["paris", "rome", "madrid", "berlin", "lisbon", "vienna", "oslo", "bern", "riga", "kyiv", "sofia", "minsk"]
        conversations = [
            [{"role": "user", "content": f"Capital number {i}?"}, {"role": "assistant", "content": city}]
            for i, city in enumerate(capitals)
        ]
        data = [conversation_to_datum(c, renderer, max_length=64) for c in conversations]
        return ChatExamples(data, batch_size=2, crash_at=self.crash_at), None


class GrowingPromptEnv(Env):
    """Two turns; the second prompt is the first plus the action and a new user line."""

    def __init__(self, prompt: list[int], turns: int) -> None:
        self.tokens, self.turns_left = list(prompt), turns

    async def initial_observation(self) -> tuple[tinker.ModelInput, list[int]]:
        return tinker.ModelInput.from_ints(self.tokens), []

    async def step(self, action: list[int], *, extra: object = None) -> StepResult:
        self.turns_left -= 1
        self.tokens += [*action, *b"\nUser: more\nAssistant:"]
        return StepResult(
            reward=sum(token in LOWERCASE for token in action) / max(len(action), 1),
            episode_done=self.turns_left == 0,
            next_observation=tinker.ModelInput.from_ints(self.tokens),
            next_stop_condition=[],
        )


class GrowingPromptGroup(EnvGroupBuilder):
    def __init__(self, prompt: list[int]) -> None:
        self.prompt = prompt

    async def make_envs(self) -> Sequence[Env]:
        return [GrowingPromptEnv(self.prompt, turns=2) for _ in range(4)]

    def logging_tags(self) -> list[str]:
        return ["growing"]


class GrowingPromptDataset(RLDataset):
    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [GrowingPromptGroup(list(f"User: write {index}.{j}\nAssistant:".encode())) for j in range(2)]

    def __len__(self) -> int:
        return 3


@chz.chz
class GrowingPromptBuilder(RLDatasetBuilder):
    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        return GrowingPromptDataset(), None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("loop", choices=["sft", "rl", "rl-stable", "rl-async"])
    parser.add_argument("log_path")
    parser.add_argument("--crash-at-batch", type=int)
    parser.add_argument("--in-process", metavar="ROOT")
    args = parser.parse_args()

    tokenizer_utils.register_tokenizer(MODEL, lambda: AutoTokenizer.from_pretrained(tiny_model_path()))
    cost_estimation.load_model_pricing = lambda **_: None  # offline: the cookbook logs token counts only
    if args.in_process:
        tinker.ServiceClient = functools.partial(LocalServiceClient, checkpoint_root=args.in_process)

    common = {"log_path": args.log_path, "model_name": MODEL, "recipe_name": "minds_cookbook_test", "lora_rank": 4}
    if args.loop == "sft":
        config = sft_train.Config(
            **common, renderer_name=RENDERER, dataset_builder=ChatExamplesBuilder(crash_at=args.crash_at_batch),
            learning_rate=1e-2, save_every=2, rolling_save_every=1, eval_every=0,
        )  # fmt: skip
        asyncio.run(sft_train.main(config))
        return
    extra = {
        "rl": {},
        "rl-stable": {"loss_fn": "stable_reinforce"},
        "rl-async": {"async_config": rl_train.AsyncConfig(max_steps_off_policy=1, groups_per_batch=2)},
    }[args.loop]
    config = rl_train.Config(
        **common, dataset_builder=GrowingPromptBuilder(), learning_rate=1e-2, max_tokens=6, save_every=2, eval_every=0,
        **extra,
    )  # fmt: skip
    asyncio.run(rl_train.main(config))


if __name__ == "__main__":
    main()

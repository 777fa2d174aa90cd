"""tinker-cookbook objects of every shape minds loads, each behind a loader the tests name with ``path:NAME``.

``CountEnv`` is two turns: its second observation extends the first (observation + action + a
reply), it stops at the string ``"."`` and rewards each action by its length. ``PairBuilder``
overrides ``compute_group_rewards`` (1 for the longest trajectory of the group) and ``cleanup``.
"""

from __future__ import annotations

from collections.abc import Sequence

import chz
import tinker
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, RLDataset, RLDatasetBuilder, StepResult

#: What the tests read back: (trajectory lengths, env count) per compute_group_rewards call, and cleanups.
CALLS: dict[str, list] = {"group_rewards": [], "cleanup": []}


class CountEnv(Env):
    def __init__(self, start: int, turns: int = 2) -> None:
        self.tokens, self.turns = [10, 11, start], turns

    async def initial_observation(self):
        return tinker.ModelInput.from_ints(self.tokens), ["."]

    async def step(self, action, *, extra=None) -> StepResult:
        self.turns -= 1
        self.tokens += [*action, 12, 13]
        return StepResult(
            reward=float(len(action)),
            episode_done=self.turns == 0,
            next_observation=tinker.ModelInput.from_ints(self.tokens),
            next_stop_condition=["."],
            metrics={"stopped": float((extra or {}).get("stop_reason") == "stop")},
        )


class PairBuilder(EnvGroupBuilder):
    def __init__(self, start: int, size: int = 2) -> None:
        self.start, self.size = start, size

    async def make_envs(self) -> Sequence[Env]:
        return [CountEnv(self.start) for _ in range(self.size)]

    async def compute_group_rewards(self, trajectory_group, env_group):
        lengths = [sum(len(t.ac.tokens) for t in trajectory.transitions) for trajectory in trajectory_group]
        CALLS["group_rewards"].append((lengths, len(env_group)))
        return [(float(n == max(lengths)), {"longest": float(n == max(lengths))}) for n in lengths]

    async def cleanup(self) -> None:
        CALLS["cleanup"].append(self.start)

    def logging_tags(self) -> list[str]:
        return ["pairs", f"start_{self.start}"]


class PairDataset(RLDataset):
    def __init__(self, batches: int) -> None:
        self.batches = batches

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [PairBuilder(20 + 2 * index), PairBuilder(21 + 2 * index)]

    def __len__(self) -> int:
        return self.batches


@chz.chz
class PairDatasetBuilder(RLDatasetBuilder):
    batches: int
    model_name_for_tokenizer: str
    renderer_name: str

    async def __call__(self):
        return PairDataset(self.batches), PairDataset(1)


@chz.chz
class HostedOnlyBuilder(RLDatasetBuilder):
    """Builds nothing without the hosted service: its __call__ asks Tinker for a client with no key."""

    async def __call__(self):
        from tinker import AuthenticationError

        raise AuthenticationError("the api_key client option must be set", response=_response(), body=None)


def _response():
    import httpx

    return httpx.Response(401, request=httpx.Request("GET", "https://tinker.example"))


def one_env() -> Env:
    return CountEnv(30)


def one_builder() -> EnvGroupBuilder:
    return PairBuilder(40)


def builders() -> list[EnvGroupBuilder]:
    return [PairBuilder(50), PairBuilder(51), PairBuilder(52)]


def dataset(batches: int = 2) -> RLDataset:
    return PairDataset(batches)


def hosted_only() -> RLDatasetBuilder:
    return HostedOnlyBuilder()


class ImageEnv(CountEnv):
    async def initial_observation(self):
        image = tinker.types.ImageChunk(data=b"\x89PNG", format="png")
        return tinker.ModelInput(chunks=[tinker.EncodedTextChunk(tokens=[1, 2]), image]), ["."]


def image_env() -> Env:
    return ImageEnv(1)


class HangingOnceEnv(CountEnv):
    """The first of its kind hangs in step (a stuck tool, a dead server); every later one plays normally."""

    made = 0

    def __init__(self) -> None:
        super().__init__(60)
        HangingOnceEnv.made += 1
        self.hangs = HangingOnceEnv.made == 1

    async def step(self, action, *, extra=None) -> StepResult:
        if self.hangs:
            import asyncio

            await asyncio.sleep(3600)
        return await super().step(action, extra=extra)


class HangingOnceBuilder(EnvGroupBuilder):
    async def make_envs(self) -> Sequence[Env]:
        return [HangingOnceEnv()]


def hanging_once() -> EnvGroupBuilder:
    return HangingOnceBuilder()


class OverflowEnv(CountEnv):
    """Its prompt is over its own budget: no sampling, the overflow's reward stands."""

    async def initial_observation(self):
        from tinker_cookbook.rl.types import InitialObservationOverflow

        return InitialObservationOverflow(reward=-1.0, metrics={"stop/max_tokens": 1.0})


def overflow_env() -> Env:
    return OverflowEnv(1)

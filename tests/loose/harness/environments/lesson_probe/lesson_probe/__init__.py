"""A dataset builder in the seed's shape: ``build(sampling_client)`` returns a LIST of environment instances.

Each instance is one task (``initial_observation()`` + async ``step()``) and
keeps the sampler it was built with; its step returns a result with the field
names of tinker-cookbook (``episode_done``, ``next_observation``) and a
non-numeric metric, as the seed's GradientProphetEnv did.
"""

import random
from dataclasses import dataclass, field

import tinker

#: Every sampler build() received, in order (the tests read it).
BUILT_WITH: list = []

PROBES = [("the sky", "blue"), ("grass", "green"), ("snow", "white"), ("coal", "black"), ("a tomato", "red")]


@dataclass
class StepResult:
    reward: float
    episode_done: bool
    next_observation: object = None
    metrics: dict = field(default_factory=dict)


class ProbeEnv:
    def __init__(self, sample: dict, sampling_client) -> None:
        self.sample = dict(sample)
        self.sample.setdefault("style", random.choice(["plain", "formal"]))  # unseeded, as in the seed
        self.sampling_client = sampling_client

    def initial_observation(self) -> str:
        return f"What colour is {self.sample['thing']}? ({self.sample['style']})"

    async def step(self, action: str) -> StepResult:
        """1 if the reply names the colour, minus 0.01 per reply token; the policy's log-prob of the reply as a metric."""
        tokens = self.sampling_client.tokenizer.encode(action, add_special_tokens=False)
        logprobs = await self.sampling_client.compute_logprobs_async(tinker.types.ModelInput.from_ints([*tokens, 0]))
        reward = float(self.sample["colour"] in action.lower()) - 0.01 * len(tokens)
        metrics = {"style": self.sample["style"], "reply_tokens": len(tokens), "reply_logprob": sum(logprobs[1:])}
        return StepResult(reward=reward, episode_done=True, metrics=metrics)


class ProbeDatasetBuilder:
    def __init__(self, count: int) -> None:
        self.samples = [{"thing": thing, "colour": colour} for thing, colour in PROBES[:count]]

    def build(self, sampling_client) -> list[ProbeEnv]:
        BUILT_WITH.append(sampling_client)
        return [ProbeEnv(sample, sampling_client) for sample in self.samples]


def load_environment(count: int = 5) -> ProbeDatasetBuilder:
    return ProbeDatasetBuilder(count)

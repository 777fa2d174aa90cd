"""ghost_trace: write five numbers from which a copy of the model can guess a secret word.

Registers the ``ghost_trace`` environment and the ``ghost_trace.latent_logprob`` reward.
"""

from __future__ import annotations

from minds_core import Register, hookimpl
from minds_ghost_trace.environment import REWARD_NAME, load_environment
from minds_ghost_trace.reward import latent_logprob


@hookimpl
def minds_register_environments(register: Register) -> None:
    register("ghost_trace", load_environment, "encode a secret word as five numbers a copy of the model can decode")


@hookimpl
def minds_register_reward_functions(register: Register) -> None:
    register(REWARD_NAME, latent_logprob, "mean log-prob per token of the word given only the numbers, +10 (-10 if invalid)")

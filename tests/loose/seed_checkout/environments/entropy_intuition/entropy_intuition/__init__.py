"""entropy_intuition: pick a number, then say how uncertain your own choice was.

One stateful instance with ``initial_observation()`` (each call draws the next
scenario) and an async ``step(text)``; ``build(sampling_client)`` hands it the
CURRENT policy, whose probabilities of the allowed numbers give the true
normalized entropy the reply is scored against.
"""

from entropy_intuition.env import EntropyIntuitionEnv, load_environment, normalized_entropy, parse_reply

__all__ = ["EntropyIntuitionEnv", "load_environment", "normalized_entropy", "parse_reply"]

"""Capture: every call an episode makes to its run's policy endpoint, recorded token-exactly, and its trajectory.

A run opens one ``EpisodeCalls`` per episode with a key made for it (``Capture.open``); the program
is given that key, and each call sending it is answered by that episode's policy (the run's current
one, whatever ``model`` the client names) and recorded: prompt ids, sampled ids, log-probs and the
policy version (``SampledCall``). A call is attributed by its key alone, never guessed; a key whose
episode has ended is refused (and counted in ``late_calls``), as are calls past ``max_calls``.

``trajectory`` turns an episode's calls into what is trained: calls whose prompt extends the
previous prompt plus completion join one sequence (prompt and tool tokens masked out); a call that
does not (a template that rewrote earlier turns, a fresh conversation) starts a new sequence.
"""

from __future__ import annotations

import collections
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from minds_core.base.logs import get_logger

from .errors import ApiError
from .sampling import Policy, SampledCall

log = get_logger("capture")

#: Keys of ended episodes remembered, to count their late calls (older ones are refused all the same, uncounted).
ENDED_KEPT = 1 << 16

__all__ = ["Capture", "EpisodeCalls", "TokenSequence", "trajectory"]


@attrs.frozen
class TokenSequence:
    """One sequence to train on: its tokens, which were sampled, and the sampler's log-prob of each (0 where not)."""

    tokens: tuple[int, ...]
    sampled: tuple[bool, ...]
    logprobs: tuple[float, ...]


@attrs.define
class EpisodeCalls:
    """One episode's endpoint: its key, its policy, and its calls so far."""

    key: str  #: the API key the episode's program sends (secret: never logged)
    policy: Policy  #: what answers its calls (the run's policy when the episode started)
    max_calls: int  #: calls past this many are refused (429) and the episode is failed as flooding
    #: the seed of its n-th call when the client sends none (a seeded run's episode samples the same again)
    seeds: Callable[[int], int | None] = lambda n: None
    calls: list[SampledCall] = attrs.field(factory=list)  #: its calls, in the order they were answered
    refused: int = 0  #: calls refused for being past ``max_calls``

    @property
    def flooded(self) -> bool:
        return self.refused > 0


class Capture:
    """The ``Models`` of a run's policy endpoint: each open episode's key answers with its policy, and records."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, EpisodeCalls] = {}
        self._ended: collections.OrderedDict[str, None] = collections.OrderedDict()  # the latest ENDED_KEPT keys
        #: calls that came with the key of an episode that had ended (the program outlived its episode)
        self.late_calls = 0

    def open(self, policy: Policy, max_calls: int, seeds: Callable[[int], int | None] = lambda n: None) -> EpisodeCalls:
        """A new episode's endpoint, with a fresh key; ``seeds(n)`` seeds its n-th call when the client sends no seed."""
        episode = EpisodeCalls(f"minds-episode-{secrets.token_urlsafe(18)}", policy, max_calls, seeds)
        with self._lock:
            self._open[episode.key] = episode
        return episode

    def close(self, episode: EpisodeCalls) -> list[SampledCall]:
        """End ``episode``: its key is refused from now on; its calls."""
        with self._lock:
            self._open.pop(episode.key, None)
            self._ended[episode.key] = None
            while len(self._ended) > ENDED_KEPT:
                self._ended.popitem(last=False)
            return list(episode.calls)

    def knows(self, key: str) -> bool:
        """Whether ``key`` is an open episode's (a key of an ended one is counted as a late call)."""
        with self._lock:
            if key in self._open:
                return True
            if key in self._ended:
                self.late_calls += 1
                log.warning(
                    "call after its episode ended",
                    late_calls=self.late_calls,
                    reason="a process of the episode outlived it (a child in a session of its own): refused, not trained on",
                )
            return False

    # -- Models --------------------------------------------------------------------------
    def names(self) -> list[str]:
        return ["policy"]

    def policy(self, model: Any, caller: str) -> Policy:
        with self._lock:
            episode = self._open.get(caller)
            if episode is None:
                raise ApiError(401, "this key's episode has ended (or never was): its calls are no longer answered")
            if len(episode.calls) >= episode.max_calls:
                episode.refused += 1
                raise ApiError(429, f"this episode made {episode.max_calls} calls, its max_calls: no more are answered")
            seed = episode.seeds(len(episode.calls))
        return attrs.evolve(episode.policy, name=model if isinstance(model, str) and model else "policy", seed=seed)

    def record(self, caller: str, call: SampledCall) -> None:
        """Keep ``call`` for ``caller``'s episode (a call finished after its episode ended is dropped, counted late)."""
        with self._lock:
            episode = self._open.get(caller)
            if episode is None:
                self.late_calls += 1
                return
            episode.calls.append(call)


def trajectory(calls: Sequence[SampledCall]) -> list[TokenSequence]:
    """The sequences an episode's calls train as (see the module docstring); a call of n > 1 completions gives
    one sequence per completion."""
    out: list[TokenSequence] = []
    tokens: list[int] = []
    sampled: list[bool] = []
    logprobs: list[float] = []

    def flush() -> None:
        if tokens:
            out.append(TokenSequence(tuple(tokens), tuple(sampled), tuple(logprobs)))
        tokens.clear(), sampled.clear(), logprobs.clear()

    for call in calls:
        if len(call.completions) != 1:
            flush()
            for completion in call.completions:
                n = len(call.prompt)
                out.append(
                    TokenSequence(
                        call.prompt + completion.tokens,
                        (False,) * n + (True,) * len(completion.tokens),
                        (0.0,) * n + completion.logprobs,
                    )
                )
            continue
        if not tokens or tuple(call.prompt[: len(tokens)]) != tuple(tokens):
            flush()
        new = call.prompt[len(tokens) :]
        completion = call.completions[0]
        tokens.extend(new), sampled.extend([False] * len(new)), logprobs.extend([0.0] * len(new))
        tokens.extend(completion.tokens), sampled.extend([True] * len(completion.tokens)), logprobs.extend(completion.logprobs)
    flush()
    return out

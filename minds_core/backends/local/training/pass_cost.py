"""Whether a request's shared prompts are run once: chosen by the measured time of both plans on this model.

A request whose datums share prompts (a group's rollouts of one prompt) runs one of two
plans: *sharing* (each prompt once in a prefix pass, the members' remaining tokens in
passes after it) or *whole* (every datum whole, packed into rows). Sharing computes
fewer tokens but adds a pass; and a pass's time is not a line in its tokens: attention
over packed rows grows with the square of a row's width, kernels and Python add a fixed
part, and both weigh differently on a CPU and on each GPU. So the plans are not modelled
but timed: the first requests with shared prompts run each plan in turn (``TRIALS``
each); from then on the plan with the lower best recent time per datum token runs, and
the other runs once more now and then, so that a change of shapes or load is followed:
after ``RETRY`` requests when the two are close, rarer by the square of their ratio
(a retry costs the gap, and a large gap is unlikely to close), so that retries cost at
most ~1/64 of the time. A request is timed whole (wall time on the CPU; CUDA events on a GPU, read
once the request has synchronised anyway, so timing adds no host sync).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Iterator

import torch

__all__ = ["PlanTimes"]

TRIALS = 2
"""Requests each plan runs before the faster is chosen (the first of them includes warm-up)."""

RETRY = 16
"""Requests between two runs of the plan not chosen, times the square of the ratio of the plans' costs."""

MAX_RETRY = 1024
"""The most requests between two runs of the plan not chosen."""

WINDOW = 8
"""Latest timings of each plan kept: a plan's cost is the best of them (noise only adds time)."""


class PlanTimes:
    """Seconds per datum token of the two plans (sharing, whole) on one device, and the choice between them.

    ``clock`` (seconds, monotonic) times requests on the CPU; tests pass a fake one. On CUDA, events time them.
    """

    def __init__(self, device: torch.device, clock: Callable[[], float] = time.perf_counter) -> None:
        self._cuda = device.type == "cuda"
        self._clock = clock
        self._times: dict[bool, deque[float]] = {share: deque(maxlen=WINDOW) for share in (True, False)}
        self._pending: list[tuple[bool, int, torch.cuda.Event, torch.cuda.Event]] = []
        self._requests = 0
        self._retry_at: int | None = None

    def choose(self) -> bool:
        """Whether the next request with shared prompts runs them once (True) or runs every datum whole."""
        self._requests += 1
        tried = {share: len(times) for share, times in self._times.items()}
        if min(tried.values()) < TRIALS:
            return tried[True] <= tried[False]  # the less tried plan; sharing first
        costs = self.seconds_per_token(True), self.seconds_per_token(False)
        faster = costs[0] <= costs[1]
        due = self._retry_at is not None and self._requests >= self._retry_at
        if self._retry_at is None or due:
            ratio = max(costs) / max(min(costs), 1e-12)
            self._retry_at = self._requests + min(MAX_RETRY, math.ceil(RETRY * ratio**2))
        return not faster if due else faster

    def seconds_per_token(self, share: bool) -> float:
        """The best recent seconds per datum token of a plan (NaN before it has run)."""
        times = self._times[share]
        return min(times) if times else float("nan")

    @contextlib.contextmanager
    def timing(self, share: bool, tokens: int) -> Iterator[None]:
        """Time the request of ``tokens`` datum tokens run inside under a plan."""
        if self._cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._pending.append((share, tokens, start, end))
        else:
            began = self._clock()
            yield
            self.record(share, tokens, self._clock() - began)

    def settle(self) -> None:
        """Read the GPU timings of requests that have finished (call after a synchronisation)."""
        for share, tokens, start, end in self._pending:
            end.synchronize()  # recorded after the request's last copy to the host: at once
            self.record(share, tokens, start.elapsed_time(end) / 1000)
        self._pending.clear()

    def record(self, share: bool, tokens: int, seconds: float) -> None:
        """Count a request of ``tokens`` datum tokens that took ``seconds`` under a plan."""
        self._times[share].append(seconds / max(tokens, 1))

    def metrics(self, share: bool) -> dict[str, float]:
        """The request's plan and the measured cost of each plan that has run (milliseconds per 1000 datum
        tokens), for the request's metrics."""
        costs = {
            f"ms_per_ktoken_{name}:mean": 1e6 * self.seconds_per_token(plan)
            for plan, name in ((True, "sharing"), (False, "whole"))
            if self._times[plan]
        }
        return {"prompt_sharing:mean": float(share), **costs}

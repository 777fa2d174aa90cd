"""What a training pass costs on one model, measured from the passes themselves: a fixed part and a part per token.

Every micro-batch pass is timed (wall time on the CPU; CUDA events on a GPU, read
once the request has synchronised anyway, so timing adds no host sync); a
least-squares line ``seconds = fixed + per_token * tokens`` through the latest
passes gives the fixed cost of a pass in tokens' worth of work. Kernel launches
and Python make the fixed part; on a GPU it is large next to a token, on a CPU
small.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterator

import torch

__all__ = ["PassCost"]

WINDOW = 64
"""Passes the line is fitted through (the latest)."""


class PassCost:
    """Timings of recent passes on one device, and the line through them."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._samples: deque[tuple[int, float]] = deque(maxlen=WINDOW)
        self._pending: list[tuple[int, torch.cuda.Event, torch.cuda.Event]] = []

    @contextlib.contextmanager
    def timing(self, tokens: int) -> Iterator[None]:
        """Time the pass of ``tokens`` (padded) input tokens run inside."""
        if self._cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._pending.append((tokens, start, end))
        else:
            began = time.perf_counter()
            yield
            self.record(tokens, time.perf_counter() - began)

    def settle(self) -> None:
        """Read the GPU timings of passes that have finished (call after a synchronisation)."""
        for tokens, start, end in self._pending:
            self.record(tokens, start.elapsed_time(end) / 1000)
        self._pending.clear()

    def record(self, tokens: int, seconds: float) -> None:
        """Count a pass of ``tokens`` input tokens that took ``seconds``."""
        self._samples.append((tokens, seconds))

    def overhead_tokens(self) -> float:
        """The fixed cost of a pass over its cost per token: 0 until passes of two sizes have been timed,
        infinite when more tokens cost no more time (the passes are bound by their fixed part)."""
        if len({tokens for tokens, _ in self._samples}) < 2:
            return 0.0
        sizes = torch.tensor([float(tokens) for tokens, _ in self._samples], dtype=torch.float64)
        seconds = torch.tensor([s for _, s in self._samples], dtype=torch.float64)
        centred = sizes - sizes.mean()
        per_token = float((centred * (seconds - seconds.mean())).sum() / (centred**2).sum())
        if per_token <= 0:
            return float("inf")
        fixed = float(seconds.mean()) - per_token * float(sizes.mean())
        return max(fixed, 0.0) / per_token

"""A FAKE device layer (``accelerator.Accelerator``) for CPU tests of the code only a GPU runs today.

It says what a GPU says (steps can be captured, memory is measured) while the
tensors live on the CPU: its "capture" records the step without running it and
returns a replay that runs the step's Python again over the same tensors (what a
CUDA graph's replay does with the same kernels), its free memory is whatever the
test sets, and it can be told to fail chosen captures and to raise an
out-of-memory error in a chosen replay. The planning, warm-up and fallback code
under test is the real one (``cuda_graphs``, ``decode_slots``,
``memory_plan``): only the device below it is faked, because this machine has
no GPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minds_core.backends.local.model.accelerator import Replay

GIB = 1 << 30


class FakeAccelerator:
    """A fake GPU-like device layer on the CPU (see the module doc)."""

    eager_reason: str | None = None
    measures_memory = True

    def __init__(
        self, free: int = 8 * GIB, total: int = 16 * GIB, fail_captures: frozenset[int] = frozenset(),
        oom_at_replay: int | None = None,
    ) -> None:  # fmt: skip
        self.free, self.total = free, total
        self.fail_captures = fail_captures
        """Which captures (counted from 0) raise, as a step that cannot be captured does."""
        self.oom_at_replay = oom_at_replay
        """The replay (counted from 0) that raises ``torch.OutOfMemoryError``, or None."""
        self.captures = self.replays = self.warms = self.releases = 0

    def free_bytes(self) -> int:
        return self.free

    def total_bytes(self) -> int:
        return self.total

    def release(self) -> None:
        self.releases += 1

    def warm(self, step: Callable[[], None]) -> None:
        self.warms += 1
        step()

    def capture(self, step: Callable[[], None], pool: object) -> Replay:
        index, self.captures = self.captures, self.captures + 1
        if index in self.fail_captures:
            raise RuntimeError(f"forced capture failure {index} (fake)")

        def replay() -> None:
            index, self.replays = self.replays, self.replays + 1
            if index == self.oom_at_replay:
                raise torch.OutOfMemoryError("forced out-of-memory in a replay (fake)")
            step()

        return replay

    def new_pool(self) -> object:
        return object()

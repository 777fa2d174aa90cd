"""Fixed-shape steps run as CUDA graphs: captured once per shape, then replayed with one launch.

A decode step is a few hundred small kernels; launched one by one from Python
they cost far more than they compute. ``StepGraphs.run(key, step)`` replays the
graph of ``step`` (a function over tensors at fixed addresses, whose shape
``key`` names) when one was captured; else it runs ``step`` once (the
accelerator's ``warm`` run, which also builds lazily made state such as cuBLAS
workspaces) and captures it for the calls after. Capture records kernels
without running them, so the step's effects happen exactly once per call.
Every value that changes between calls must be in a tensor the step reads,
never a Python number. A sampler captures the shapes its run will use in a
warm-up before its first request (``DecodeSlots.warm_up``); ``run`` captures
any other shape the first time it comes.

Where capture is impossible (the CPU, ``local.cuda_graphs = "off"``, a model
whose step is not a fixed set of kernels) every call runs eagerly, the reason
logged once per process. A capture that fails falls back for that shape only:
that shape runs eagerly from then on, one warning names the shape, the reason
and the setting that turns capture off, and ``EVENTS`` counts it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from minds_core.base.logs import get_logger

from ..model.accelerator import EVENTS, Accelerator, Replay

__all__ = ["OFF_SETTING", "StepGraphs"]

OFF_SETTING = 'local.cuda_graphs = "off"'
"""The setting that turns capture off, as warnings name it."""

log = get_logger("sampler")
_logged: set[str] = set()


def _log_once(reason: str, capturable: bool) -> None:
    """Say once per process and reason why decode steps run eagerly (at debug level where the device captures
    nothing anyway, as on the CPU)."""
    if reason not in _logged:
        _logged.add(reason)
        (log.info if capturable else log.debug)("decode steps run eagerly", reason=reason)


class StepGraphs:
    """Steps keyed by shape, run as graphs on ``accelerator`` unless ``eager_reason`` (or the accelerator's) says
    why not."""

    def __init__(self, accelerator: Accelerator, eager_reason: str | None = None) -> None:
        self.accelerator = accelerator
        self.eager_reason = accelerator.eager_reason or eager_reason
        if self.eager_reason is not None:
            _log_once(self.eager_reason, accelerator.eager_reason is None)
        self._graphs: dict[Hashable, Replay] = {}
        self.failed: dict[Hashable, str] = {}
        """The shapes whose capture failed (they run eagerly), and why."""
        self._pool: object | None = None

    @property
    def capturing(self) -> bool:
        """Whether steps are captured (else every call runs eagerly)."""
        return self.eager_reason is None

    @property
    def captured(self) -> int:
        """Graphs held."""
        return len(self._graphs)

    def has(self, key: Hashable) -> bool:
        """Whether ``key``'s step is settled: captured, or run eagerly after its capture failed."""
        return key in self._graphs or key in self.failed

    def run(self, key: Hashable, step: Callable[[], None]) -> None:
        """Run ``step``: replay its graph for ``key``, or run it (eagerly) and capture it for next time."""
        graph = self._graphs.get(key)
        if graph is not None:
            graph()
            return
        if not self.capturing or key in self.failed:
            step()
            return
        self.accelerator.warm(step)
        if self._pool is None:
            self._pool = self.accelerator.new_pool()
        try:
            self._graphs[key] = self.accelerator.capture(step, self._pool)
        except Exception as exc:  # noqa: BLE001 - this shape runs eagerly from now on, said once
            reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]
            self.failed[key] = reason
            EVENTS.count("capture_fallbacks")
            log.warning(
                "a decode step runs eagerly: its CUDA graph capture failed",
                shape=repr(key),
                reason=reason,
                off=f"set {OFF_SETTING} to run every step eagerly",
            )

    def clear(self) -> None:
        """Forget every graph (the tensors they read were replaced); shapes that failed stay eager."""
        self._graphs.clear()

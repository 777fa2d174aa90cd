"""Fixed-shape steps run as CUDA graphs: captured once per shape, then replayed with one launch.

A decode step is a few hundred small kernels; launched one by one from Python
they cost far more than they compute. ``StepGraphs.run(key, step)`` runs
``step`` (a function over tensors at fixed addresses, whose shape ``key``
names) eagerly the first time, on a side stream (which also warms up lazily
built state such as cuBLAS workspaces), then captures it into a graph that
later calls replay. Capture records kernels without running them, so the
step's effects happen exactly once per call. Every value that changes between
calls must be in a tensor the step reads, never a Python number.

Where capture is impossible (the CPU, a model whose step is not a fixed set of
kernels, or a capture that fails) every call runs eagerly; the reason is
logged once per process.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch

from minds_core.logs import get_logger

__all__ = ["StepGraphs"]

log = get_logger("sampler")
_logged: set[str] = set()


def _log_once(reason: str, device: torch.device) -> None:
    """Say once per process and reason why decode steps run eagerly (at debug level on the CPU, where it is
    the norm)."""
    if reason not in _logged:
        _logged.add(reason)
        (log.info if device.type == "cuda" else log.debug)("decode steps run eagerly", reason=reason)


class StepGraphs:
    """Steps keyed by shape, run as CUDA graphs on ``device`` unless ``eager_reason`` says why not."""

    def __init__(self, device: torch.device, eager_reason: str | None = None) -> None:
        if eager_reason is None and device.type != "cuda":
            eager_reason = f"CUDA graphs need a GPU; the device is {device.type}"
        self.eager_reason = eager_reason
        self.device = device
        if eager_reason is not None:
            _log_once(eager_reason, device)
        self._graphs: dict[Hashable, torch.cuda.CUDAGraph] = {}
        self._pool: object | None = None

    @property
    def capturing(self) -> bool:
        """Whether steps are captured (else every call runs eagerly)."""
        return self.eager_reason is None

    @property
    def captured(self) -> int:
        """Graphs held."""
        return len(self._graphs)

    def run(self, key: Hashable, step: Callable[[], None]) -> None:
        """Run ``step``: replay its graph for ``key``, or run it eagerly and capture it for next time."""
        graph = self._graphs.get(key)
        if graph is not None:
            graph.replay()
            return
        if not self.capturing:
            step()
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            # thread_local: other threads (a training step) may use the GPU meanwhile, and allocate.
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                step()
        except Exception as exc:  # noqa: BLE001 - an uncapturable step runs eagerly from now on
            self.eager_reason = f"capture failed: {type(exc).__name__}: {exc}"
            self._graphs.clear()
            _log_once(self.eager_reason, self.device)
            return
        self._graphs[key] = graph

    def clear(self) -> None:
        """Forget every graph (the tensors they read were replaced)."""
        self._graphs.clear()

"""The device layer: what the sampler's graph, budget and fallback code asks of the device it runs on.

``Accelerator`` is the small interface ``cuda_graphs``, ``memory_plan`` and the
engines use: memory (free and total bytes, giving cached blocks back), CUDA
graph capture (a warm run of a step, then its capture into something that
replays it), and telling an out-of-memory error from others. ``CudaAccelerator``
is torch.cuda's; ``CpuAccelerator`` captures nothing (its ``eager_reason`` says
why) and gives a fixed memory figure. A test hands the engines a fake of its
own through ``Placement.accelerator``, so the planning and fallback code that a
GPU runs also runs, as it is, on the CPU.

``EngineEvents`` counts what fell back (per process, read and reset by the
training engine into its metrics): captures that failed, compiles that failed,
out-of-memory errors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

import torch

from .errors import LocalRequestFailedError

__all__ = [
    "Accelerator",
    "CpuAccelerator",
    "CudaAccelerator",
    "EVENTS",
    "EngineEvents",
    "Replay",
    "accelerator_for",
    "is_out_of_memory",
    "out_of_memory_error",
]

Replay = Callable[[], None]
"""A captured step: calling it runs the step's kernels again over the same tensors."""

CPU_MEMORY_BYTES = 2 << 30
"""What ``CpuAccelerator`` says is free: the keys/values a CPU decode batch may hold (the machine's memory is not
measured here)."""


class Accelerator(Protocol):
    """What the engines ask of a device (see the module doc). Fields and methods:

    * ``eager_reason``: why steps cannot be captured on it (None: they can);
    * ``measures_memory``: whether ``free_bytes`` measures the memory (a GPU's), or gives a fixed budget (the CPU's:
      the machine's memory is not the engines' to plan);
    * ``free_bytes()`` / ``total_bytes()``: its memory free now and in all;
    * ``release()``: give cached, unused memory back (after an out-of-memory error);
    * ``warm(step)``: run ``step`` once, as capture wants it run first (lazily built state such as cuBLAS
      workspaces made outside the capture);
    * ``capture(step, pool)``: record ``step`` without running it and return what replays it, sharing the memory
      pool ``pool`` (a ``new_pool()``) with the other steps captured; raises where the step cannot be captured;
    * ``new_pool()``: a memory pool for captured steps.
    """

    eager_reason: str | None
    measures_memory: bool

    def free_bytes(self) -> int: ...

    def total_bytes(self) -> int: ...

    def release(self) -> None: ...

    def warm(self, step: Callable[[], None]) -> None: ...

    def capture(self, step: Callable[[], None], pool: object) -> Replay: ...

    def new_pool(self) -> object: ...


class CudaAccelerator:
    """torch.cuda's: CUDA graphs, the GPU's memory as the driver reports it."""

    eager_reason: str | None = None
    measures_memory = True

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def free_bytes(self) -> int:
        return int(torch.cuda.mem_get_info(self.device)[0])

    def total_bytes(self) -> int:
        return int(torch.cuda.mem_get_info(self.device)[1])

    def release(self) -> None:
        torch.cuda.empty_cache()

    def warm(self, step: Callable[[], None]) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()
        torch.cuda.current_stream().wait_stream(side)

    def capture(self, step: Callable[[], None], pool: object) -> Replay:
        graph = torch.cuda.CUDAGraph()
        # thread_local: other threads (a training step) may use the GPU meanwhile, and allocate.
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            step()
        return graph.replay

    def new_pool(self) -> object:
        return torch.cuda.graph_pool_handle()


class CpuAccelerator:
    """The CPU's: nothing captured, ``CPU_MEMORY_BYTES`` free."""

    eager_reason: str | None = "CUDA graphs need a GPU; the device is cpu"
    measures_memory = False

    def free_bytes(self) -> int:
        return CPU_MEMORY_BYTES

    def total_bytes(self) -> int:
        return CPU_MEMORY_BYTES

    def release(self) -> None:
        return None

    def warm(self, step: Callable[[], None]) -> None:
        step()

    def capture(self, step: Callable[[], None], pool: object) -> Replay:
        raise RuntimeError(self.eager_reason)

    def new_pool(self) -> object:
        return None


def accelerator_for(device: torch.device) -> Accelerator:
    """The device layer of ``device``."""
    return CudaAccelerator(device) if device.type == "cuda" else CpuAccelerator()


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the device ran out of memory."""
    return isinstance(exc, torch.OutOfMemoryError)


def out_of_memory_error(accelerator: Accelerator, where: str, lower: str) -> LocalRequestFailedError:
    """After an out-of-memory error in ``where`` (whose tensors are gone): count it, give cached memory back, and
    the one-line error that says what to lower (``lower``)."""
    EVENTS.count("out_of_memory")
    accelerator.release()
    return LocalRequestFailedError(
        f"out of device memory in {where}; cached memory was given back; {lower}, or set local.cuda_graphs = \"off\" "
        "(the sampler's captured steps keep a memory pool of their own)"
    )


class EngineEvents:
    """Counts of what fell back in this process since last read (thread-safe); see the module doc."""

    NAMES = ("capture_fallbacks", "compile_fallbacks", "out_of_memory")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.NAMES, 0)

    def count(self, name: str) -> None:
        """One more ``name`` (one of ``NAMES``)."""
        with self._lock:
            self._counts[name] += 1

    def take(self) -> dict[str, int]:
        """The counts since the last ``take``, then zero."""
        with self._lock:
            counts, self._counts = self._counts, dict.fromkeys(self.NAMES, 0)
        return counts


EVENTS = EngineEvents()
"""The process's counts."""

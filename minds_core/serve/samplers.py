"""The sampling sessions ``minds serve`` keeps: the most recently used, within a memory budget and a count.

An RL loop through the SDK makes a sampling client every step
(``save_weights_and_get_sampling_client``) and never says when it is done with one. On the
local backend each holds memory of its own (``SamplingClient.held_bytes``: the adapted weights
it samples with and its decode buffers). The server keeps the most recently used ones while
their bytes together stay within ``SamplerBudget.sampler_memory_gib`` and their number within
``max_samplers``; past either, the least recently used are dropped, and the most recent one
always stays (alone, if it is past the budget by itself). A dropped client's memory goes back
to the local backend once no running request holds it (its weights to the small pool the next
snapshot reuses); a request to it is told why it was dropped and what to do. Memory is counted
each time a sampling client is kept, as allocated then (decode buffers grow as a client samples).
"""

from __future__ import annotations

import argparse
import collections
from typing import TYPE_CHECKING, NamedTuple

import attrs

from minds_core.config.rules import above, arg, at_least, field_rule, problem

if TYPE_CHECKING:
    import torch

    from minds_core.backends.local import SamplingClient

__all__ = [
    "CPU_SAMPLER_MEMORY_GIB",
    "GPU_SAMPLER_MEMORY_FRACTION",
    "KeptSamplers",
    "SamplerBudget",
    "add_sampler_arguments",
    "budget_from_arguments",
]

GPU_SAMPLER_MEMORY_FRACTION = 0.2
"""The default budget on a GPU: this part of its free memory once the base models are loaded. The rest is the
training runs' (weights, optimizer state, activations) and the decode buffers' growth while sampling."""
CPU_SAMPLER_MEMORY_GIB = 4.0
"""The default budget on the CPU, in GiB."""
_GIB = 1 << 30
_DROPPED_NAMED = 4096  # dropped ids remembered, to say why when one is asked for


@attrs.frozen
class SamplerBudget:
    """What ``minds serve`` keeps of the sampling clients made (see the module doc); a ``--flag`` per field."""

    sampler_memory_gib: float | None = arg(
        None,
        above(0),
        doc="GiB the kept sampling clients may hold together (adapted weights and decode buffers; the most recent "
        f"one is always kept); default: {GPU_SAMPLER_MEMORY_FRACTION:g} of the GPU's free memory once the models "
        f"are loaded, {CPU_SAMPLER_MEMORY_GIB:g} on the CPU",
    )
    max_samplers: int = arg(
        16, at_least(1), doc="most sampling clients kept, however little memory they hold (each keeps a worker thread)"
    )

    def memory_bytes(self, device: torch.device) -> int:
        """The memory budget in bytes on ``device``: the given GiB, else the default there (see the fields)."""
        if self.sampler_memory_gib is not None:
            return int(self.sampler_memory_gib * _GIB)
        if device.type == "cuda":
            import torch

            return int(torch.cuda.mem_get_info(device)[0] * GPU_SAMPLER_MEMORY_FRACTION)
        return int(CPU_SAMPLER_MEMORY_GIB * _GIB)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_sampler_arguments(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per ``SamplerBudget`` field, its help taken from the field."""
    group = parser.add_argument_group("sampling clients kept (the least recently used are dropped past these)")
    for field in attrs.fields(attrs.resolve_types(SamplerBudget)):
        group.add_argument(
            _flag(field.name),
            dest=f"sampler_{field.name}",
            type=float if field.type == float | None else int,
            default=field.default,
            metavar="N",
            help=field.metadata["doc"] + ("" if field.default is None else f" (default {field.default})"),
        )


def budget_from_arguments(args: argparse.Namespace) -> SamplerBudget:
    """The ``SamplerBudget`` of parsed ``add_sampler_arguments`` flags; ``ValueError`` names a bad one and its rule."""
    values = {}
    for field in attrs.fields(attrs.resolve_types(SamplerBudget)):
        value = values[field.name] = getattr(args, f"sampler_{field.name}")
        wrong = problem(field_rule(field), value, field.type)
        if wrong is not None:
            raise ValueError(f"{_flag(field.name)} {value}: {wrong}")
    return SamplerBudget(**values)


class Kept(NamedTuple):
    """A kept sampling session: the local client, the weights' path it was made from (None: a snapshot or a base
    model), and the client (API key digest) that made it."""

    sampler: SamplingClient
    model_path: str | None
    owner: str


class KeptSamplers:
    """Sampling sessions by id, least recently used first, within ``memory_bytes`` and ``max_samplers``.

    Not thread-safe: the engine calls it with its lock held."""

    def __init__(self, memory_bytes: int, max_samplers: int) -> None:
        self.memory_bytes = memory_bytes
        self.max_samplers = max_samplers
        self._kept: collections.OrderedDict[str, Kept] = collections.OrderedDict()
        self._dropped: collections.OrderedDict[str, str] = collections.OrderedDict()  # id -> why

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, sampler_id: str, kept: Kept) -> None:
        """Keep a new sampling session as the most recently used; drop the least recently used past the limits."""
        self._kept[sampler_id] = kept
        self._kept.move_to_end(sampler_id)
        while len(self._kept) > 1:
            total = self.held_bytes()
            if len(self._kept) > self.max_samplers:
                why = f"minds serve keeps the {self.max_samplers} most recently used sampling clients (--max-samplers)"
            elif total > self.memory_bytes:
                why = (
                    f"minds serve keeps the most recently used sampling clients within {self.memory_bytes / _GIB:.3g} "
                    "GiB of memory together (--sampler-memory-gib)"
                )
            else:
                return
            dropped, _ = self._kept.popitem(last=False)
            self._dropped[dropped] = why
            while len(self._dropped) > _DROPPED_NAMED:
                self._dropped.popitem(last=False)

    def use(self, sampler_id: str, owner: str) -> Kept | None:
        """``owner``'s session ``sampler_id``, now the most recently used; None if it is not kept (or not theirs)."""
        kept = self._kept.get(sampler_id)
        if kept is None or kept.owner != owner:
            return None
        self._kept.move_to_end(sampler_id)
        return kept

    def why_dropped(self, sampler_id: str) -> str | None:
        """Why the session ``sampler_id`` was dropped; None if it was not (or too long ago to remember)."""
        return self._dropped.get(sampler_id)

    def ids(self, prefix: str) -> list[str]:
        """Kept sessions whose ids start with ``prefix``, least recently used first."""
        return [key for key in self._kept if key.startswith(prefix)]

    def forget(self, prefix: str) -> None:
        """Drop the sessions whose ids start with ``prefix`` (a finished session's)."""
        for key in self.ids(prefix):
            del self._kept[key]

    def held_bytes(self) -> int:
        """Bytes the kept sampling clients hold of their own, as allocated now (clients sharing an engine: once)."""
        engines = {id(entry.sampler.engine): entry.sampler for entry in self._kept.values()}
        return sum(sampler.held_bytes for sampler in engines.values())

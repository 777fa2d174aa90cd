"""The device side of a decode batch: slots' keys/values and sampling state, and the step over them.

A step over the first ``rows`` slots is two fixed-shape parts: ``draw`` (choose
each row's token from its logits, record it, update counts and stop flags;
``device_sampling``) and ``forward`` (feed the tokens at the rows' positions,
write their keys/values, compute the next logits; ``fast_decode``). Each part is
a CUDA graph per shape where the device allows (``cuda_graphs``): ``rows`` is
bucketed to a power of two, the attended ``columns`` to a few sizes per octave,
so a batch replays a handful of graphs. Nothing here syncs with the host but
``progress`` and ``read``, which the host calls every few steps.

One ``DecodeSlots`` serves one model (``for_model``), across the samplers that
use it in turn: samplers of successive snapshots of an adapter reuse the same
pooled module tree (``adapted_models``), and so the same buffers and graphs.

The keys/values may hold what ``SlotSettings.kv_budget`` allows (a run's memory
plan, or what is free beyond training's share: ``memory_plan``); a sampler that
cannot hold one sequence refuses in one line. A run's sampler reserves its
planned rows and context and captures every step shape they lead to before its
first request (``warm_up``, timed and logged), so that its steps only replay;
buffers that must grow past that later drop the graphs, and the shapes then met
are captured as they come (logged).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from minds_core.base.logs import get_logger

from ..model.accelerator import Accelerator
from ..model.cache_argument import cache_argument
from ..model.errors import LocalBadRequestError
from ..model.memory_plan import POSITION_GRANULE, size_text
from .cuda_graphs import OFF_SETTING, StepGraphs
from .device_sampling import Draws, RowSettings
from .fast_decode import FastDecoder
from .kv_slots import KVSlots

__all__ = ["DecodeSlots", "Kinds", "SlotSettings"]

log = get_logger("sampler")

Kinds = tuple[bool, bool, bool, bool]
"""Whether any row of a step is greedy, is tempered, is tempered at other than 1, truncates (top-k/top-p):
``Draws.draw``'s switches."""


@dataclass(frozen=True)
class SlotSettings:
    """How a model's decode slots are made (from the placement and the run's memory plan)."""

    max_rows: int
    """Rows decoded at once at most."""
    accelerator: Accelerator
    """The device layer: memory, capture."""
    capture: bool = True
    """Whether steps are captured where the device can (``local.cuda_graphs``)."""
    compile_mode: str | None = None
    """``FastDecoder``'s ``torch.compile`` mode, or None."""
    kv_budget: Callable[[int], int] | None = None
    """Bytes the keys/values may hold, given the bytes they hold now; None: what the accelerator says is free."""

_instances: weakref.WeakKeyDictionary[nn.Module, DecodeSlots] = weakref.WeakKeyDictionary()
_instances_lock = threading.Lock()


def _power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


class _ModelForward:
    """A decode step through the model's own ``forward`` (architectures ``FastDecoder`` does not reproduce)."""

    def __init__(self, model: nn.Module) -> None:
        self._model = weakref.ref(model)  # the model owns its DecodeSlots, not the other way round

    def __call__(self, slots: KVSlots, token_ids: torch.Tensor) -> torch.Tensor:
        model = self._model()
        assert model is not None, "a model's decode slots outlive it only unused"
        out = model(
            input_ids=token_ids[:, None],
            position_ids=slots.positions[: slots.rows, None],
            attention_mask=slots.mask(slots.keys[0].dtype)[:, None, None],
            **cache_argument(slots),
        )
        return out.logits[:, -1]


class DecodeSlots:
    """Decode slots of one model on its device; see the module doc. Hold ``lock`` while using them."""

    def __init__(self, model: nn.Module, settings: SlotSettings) -> None:
        self.lock = threading.Lock()
        self.settings = settings
        self.max_rows = settings.max_rows
        parameter = next(model.parameters())
        self.device = parameter.device
        self._fast = fast = FastDecoder.for_model(model, settings.compile_mode)
        self._forward: Callable[[KVSlots, torch.Tensor], torch.Tensor] = (
            fast.forward if fast is not None else _ModelForward(model)
        )
        reason = None if fast is not None else f"{type(model).__name__} decodes through its own forward"
        if not settings.capture:
            reason = f"{OFF_SETTING} is set"
        self.graphs = StepGraphs(settings.accelerator, reason)
        self.kv: KVSlots | None = None
        self.draws: Draws | None = None
        self.warmed: tuple[int, int] | None = None
        """The rows and positions ``warm_up`` captured every step shape of (None before it ran)."""

    @classmethod
    def for_model(cls, model: nn.Module, settings: SlotSettings) -> DecodeSlots:
        """The decode slots of ``model`` (made on first use with ``settings``, kept while the model lives)."""
        with _instances_lock:
            slots = _instances.get(model)
            if slots is None:
                slots = _instances[model] = cls(model, settings)
            return slots

    def refresh(self) -> None:
        """Take up the adapter weights now loaded into the model (a new sampler of a pooled tree: ``adapted_models``)."""
        if self._fast is not None and self._fast.adapted:
            with self.lock:
                self._fast.refresh()

    def held(self) -> list[torch.Tensor]:
        """Every tensor these slots hold or read: keys/values, sampling state, the fast decoder's (the model's
        weights among them; ``held_bytes`` leaves out what is shared). A captured graph's private pool of
        intermediates is not among them. Safe without ``lock`` (which a whole decode batch holds): each buffer is
        read once, as ``reserve`` on another thread may drop it meanwhile."""
        kv, draws, fast = self.kv, self.draws, self._fast
        tensors = [*(kv.held() if kv is not None else ()), *(draws.held() if draws is not None else ())]
        return tensors + (fast.held() if fast is not None else [])

    @property
    def slots(self) -> int:
        """Slots held (0 before the first ``reserve``)."""
        return self.kv.slots if self.kv is not None else 0

    @property
    def capacity(self) -> int:
        """Positions per slot."""
        return self.kv.capacity if self.kv is not None else 0

    def reserve(
        self, rows: int, capacity: int, stops: int, like: Sequence[tuple[torch.Tensor, torch.Tensor]], vocab: int
    ) -> int:
        """Make room for ``rows`` slots of ``capacity`` positions (as far as ``max_rows`` and memory allow; at least
        one slot) and ``stops`` stop tokens per row; keys/values shaped as ``like``'s. Growing keeps every slot's
        contents and drops the captured graphs. Returns the slots held."""
        granule = POSITION_GRANULE if self.graphs.capturing else 64
        capacity = max(-(-capacity // granule) * granule, self.capacity)
        stops = max(_power_of_two(stops), 4, self.draws.stops if self.draws is not None else 0)
        rows = min(_power_of_two(rows), _power_of_two(self.max_rows))
        per_slot = capacity * sum(2 * k.shape[1] * k.shape[3] * k.element_size() for k, _ in like)
        budget = self._kv_budget()
        if budget < per_slot and self.slots == 0:
            raise LocalBadRequestError(
                f"the sampler cannot hold one sequence of {capacity} positions: its keys/values need "
                f"{size_text(per_slot)} and {size_text(budget)} is left for them; lower the "
                "prompt plus max_tokens, or free memory (fewer samplers kept, a smaller model)"
            )
        rows = max(min(rows, budget // per_slot), self.slots, 1)
        if (
            rows <= self.slots
            and capacity <= self.capacity
            and self.draws is not None
            and stops <= self.draws.stops
            and self.draws.vocab == vocab
        ):
            return self.slots
        k = like[0][0]
        kv = KVSlots(len(like), k.shape[1], k.shape[3], rows, capacity, k.dtype, self.device)
        draws = Draws(rows, vocab, capacity, stops, self.device)
        if self.kv is not None and self.draws is not None and self.draws.vocab == vocab:
            kv.copy_from(self.kv)
            draws.copy_from(self.draws)
        self.kv = self.draws = None  # the old buffers go before the graphs that read them
        if self.graphs.captured and self.warmed is not None:
            log.info(
                "decode buffers grew past the warm-up's: their graphs are captured again as shapes come",
                graphs=self.graphs.captured, rows=rows, positions=capacity, warmed=self.warmed,
            )  # fmt: skip
        self.graphs.clear()
        self.kv, self.draws = kv, draws
        return rows

    def _kv_budget(self) -> int:
        held = self.kv.bytes_per_position * self.slots * self.capacity if self.kv is not None else 0
        if self.settings.kv_budget is not None:
            return self.settings.kv_budget(held)
        return held + self.settings.accelerator.free_bytes()

    def warm_up(
        self, rows: int, capacity: int, stops: int, like: Sequence[tuple[torch.Tensor, torch.Tensor]], vocab: int,
        kinds: Sequence[Kinds],
    ) -> None:  # fmt: skip
        """Reserve ``rows`` slots of ``capacity`` positions and capture every step a batch within them can take
        (draws of each of ``kinds``, forwards over each row bucket and column size), on the free slots (whose
        state a row joining resets), timed and logged. Nothing to capture where steps run eagerly."""
        if not self.graphs.capturing:
            return
        began = time.perf_counter()
        with self.lock:
            rows = self.reserve(rows, capacity, stops, like, vocab)
            capacity = self.capacity
            buckets = sorted({self.bucket(1 << n) for n in range(rows.bit_length())})
            columns = sorted({self.columns(c) for c in range(1, capacity + 1)})
            for bucket in buckets:
                for kind in kinds:
                    self.step(bucket, 1, kind, 0, feed=False)
                for column in columns:
                    self.step(bucket, column, kinds[0], 0)
            self.warmed = (rows, capacity)
        log.info(
            "decode steps captured", rows=rows, positions=capacity, graphs=self.graphs.captured,
            failed=len(self.graphs.failed), seconds=round(time.perf_counter() - began, 2),
        )  # fmt: skip

    def bucket(self, rows: int) -> int:
        """The rows a step over slots ``0 .. rows - 1`` runs: the next power of two, within the slots held."""
        return min(_power_of_two(rows), self.slots)

    def columns(self, columns: int) -> int:
        """The positions a step attends over to cover ``columns``: as captured graphs are keyed, a few sizes per
        octave (multiples of 128, of a quarter of the octave past 512); exactly ``columns`` when steps run eagerly."""
        if self.graphs.capturing:
            granule = max(128, _power_of_two(columns) // 8)
            columns = -(-columns // granule) * granule
        return min(columns, self.capacity)

    def join(
        self, slots: list[int], prompt_kv: Sequence[tuple[torch.Tensor, torch.Tensor]], logits: torch.Tensor,
        settings: list[RowSettings],
    ) -> None:  # fmt: skip
        """Start a row in each of ``slots``: one prompt's keys/values, its next-token logits, each row's settings."""
        assert self.kv is not None and self.draws is not None, "reserve first"
        index = torch.tensor(slots, device=self.device)
        self.kv.fill(index, prompt_kv)
        self.draws.join(index, logits, settings)

    def leave(self, slots: list[int]) -> None:
        """Free ``slots``."""
        if slots:
            assert self.draws is not None
            self.draws.leave(torch.tensor(slots, device=self.device))

    def move(self, source: list[int], target: list[int]) -> None:
        """Copy the rows in slots ``source`` onto slots ``target``, and free ``source``."""
        assert self.kv is not None and self.draws is not None
        src, dst = torch.tensor(source, device=self.device), torch.tensor(target, device=self.device)
        self.kv.move(src, dst)
        self.draws.move(src, dst)
        self.draws.leave(src)

    def step(self, rows: int, reach: int, kinds: Kinds, top: int, feed: bool = True, aligned: bool = False) -> None:
        """One token for slots ``0 .. rows - 1``: draw it (and its ``top`` log-probs), then feed it (unless no row
        goes on: ``feed`` off) attending over ``reach`` positions (``columns`` of them, captured). ``aligned``:
        every row that goes on is fed at position ``reach - 1``, so that an eager step needs no mask (a captured
        one attends over more columns than that, and masks them)."""
        columns = self.columns(reach)
        aligned = aligned and not self.graphs.capturing
        draws = self.draws
        assert draws is not None
        self.graphs.run(("draw", rows, kinds), lambda: draws.draw(rows, *kinds))
        if top:
            draws.want_top(top)
            draws.record_top(rows, top)
        if feed:
            self.graphs.run(("forward", rows, columns, aligned), lambda: self._feed(rows, columns, aligned))

    def _feed(self, rows: int, columns: int, aligned: bool) -> None:
        kv, draws = self.kv, self.draws
        assert kv is not None and draws is not None
        kv.window(rows, columns, aligned)
        row = draws.first(rows)
        row.logits.copy_(self._forward(kv, row.tokens))
        kv.advance(~row.done)

    def progress(self, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Whether each of slots ``0 .. rows - 1`` is done, and its count of sampled tokens (a host sync)."""
        assert self.draws is not None
        both = torch.stack((self.draws.done[:rows].long(), self.draws.count[:rows])).cpu().numpy()
        return both[0].astype(bool), both[1]

    def read(self, slots: list[int], length: int, top: int = 0) -> tuple[np.ndarray, ...]:
        """The first ``length`` sampled tokens and log-probs of ``slots`` (and the ``top`` ids and log-probs per
        token when asked), as host arrays ``[len(slots), length(, top)]``."""
        draws = self.draws
        assert draws is not None
        index = torch.tensor(slots, device=self.device)
        parts = [draws.out_tokens[index, :length], draws.out_logprobs[index, :length]]
        if top:
            parts += [draws.top_ids[index, :length, :top], draws.top_logprobs[index, :length, :top]]
        return tuple(part.cpu().numpy() for part in parts)

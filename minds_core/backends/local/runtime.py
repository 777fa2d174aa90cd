"""What the clients of one ``ServiceClient`` share: its session, base models, checkpoints and worker threads."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from pathlib import Path

from .futures import RequestQueue
from .model.memory_plan import RunShape
from .model.models import BaseModelRegistry
from .model.placement import Placement
from .sampling.engine import SamplingEngine
from .sampling_client import SamplingClient
from .session import Session
from .training.checkpoints import CheckpointStore

__all__ = ["Runtime"]


class Runtime:
    """Shared state of one local service; clients hold a reference to it."""

    def __init__(
        self, checkpoint_root: Path, placement: Placement, session: Session, run_shape: RunShape | None = None
    ) -> None:
        self.session = session
        self.models = BaseModelRegistry(placement, run_shape)
        self.store = CheckpointStore(checkpoint_root)
        self._queues: weakref.WeakSet[RequestQueue] = weakref.WeakSet()
        # the engine of each base model and each save of a checkpoint, while a client of it lives (see ``_shared``)
        self._engines: weakref.WeakValueDictionary[Hashable, SamplingEngine] = weakref.WeakValueDictionary()
        self._engines_lock = threading.Lock()

    def queue(self, name: str) -> RequestQueue:
        """A new worker thread for one client, closed with the service."""
        queue = RequestQueue(name)
        self._queues.add(queue)
        return queue

    def sampling_client(self, sampler: SamplingEngine, queue: RequestQueue, model_path: str | None = None) -> SamplingClient:
        """A client of ``sampler`` (the weights saved at ``model_path``, if any), listed in the session while it lives."""
        client = SamplingClient(sampler, queue, model_path)
        self.session.add_sampler(client)
        return client

    def sampling_client_from_path(self, path: str, queue: RequestQueue) -> SamplingClient:
        """A client sampling the adapter saved at tinker ``path``: the engine of that save, shared with every other
        client of it alive (loaded once, not once per client; a checkpoint saved again at ``path`` gets its own)."""
        saved = self.store.version(path)  # None: nothing loadable there, and the load says why

        def load() -> SamplingEngine:
            checkpoint = self.store.load(path, with_optimizer=False)
            base = self.models.get(checkpoint.base_model)
            return SamplingEngine.for_adapter(base, checkpoint.lora, checkpoint.adapter)

        return self.sampling_client(self._shared(("path", path, saved), load) if saved else load(), queue, path)

    def base_sampling_client(self, base_model: str, queue: RequestQueue) -> SamplingClient:
        """A client sampling the bare ``base_model``, on the engine every other such client alive shares."""
        return self.sampling_client(self._shared(("base", base_model), lambda: SamplingEngine.for_base(self.models.get(base_model))), queue)

    def _shared(self, key: Hashable, make: Callable[[], SamplingEngine]) -> SamplingEngine:
        """The engine kept under ``key`` while a client uses it, else a new one from ``make``: clients of the same
        weights (a run's Ray workers each make one per step) decode in one batch, as requests of one client do."""
        with self._engines_lock:
            engine = self._engines.get(key)
            if engine is None:
                engine = self._engines[key] = make()
            return engine

    def close(self) -> None:
        """Stop accepting requests on every client's worker (queued ones still run); the session lists none."""
        for queue in list(self._queues):
            queue.close()
        self.session.close()

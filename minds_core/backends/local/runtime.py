"""What the clients of one ``ServiceClient`` share: its session, base models, checkpoints and worker threads."""

from __future__ import annotations

import weakref
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
        """A client sampling the adapter saved at tinker ``path``."""
        checkpoint = self.store.load(path, with_optimizer=False)
        base = self.models.get(checkpoint.base_model)
        return self.sampling_client(SamplingEngine.for_adapter(base, checkpoint.lora, checkpoint.adapter), queue, path)

    def close(self) -> None:
        """Stop accepting requests on every client's worker (queued ones still run); the session lists none."""
        for queue in list(self._queues):
            queue.close()
        self.session.close()

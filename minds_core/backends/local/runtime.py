"""What the clients of one ``ServiceClient`` share: base models, checkpoints and worker threads."""

from __future__ import annotations

import uuid
import weakref
from pathlib import Path

from .checkpoints import CheckpointStore
from .futures import RequestQueue
from .models import BaseModelRegistry
from .placement import Placement
from .sampling_client import SamplingClient
from .sampling_engine import SamplingEngine

__all__ = ["Runtime"]


class Runtime:
    """Shared state of one local service; clients hold a reference to it."""

    def __init__(self, checkpoint_root: Path, placement: Placement) -> None:
        #: names the service as the SDK's session id does: a custom loss's ``LossHandle`` works with its clients only
        self.session_id = f"local-session-{uuid.uuid4().hex[:16]}"
        self.models = BaseModelRegistry(placement)
        self.store = CheckpointStore(checkpoint_root)
        self._queues: weakref.WeakSet[RequestQueue] = weakref.WeakSet()

    def queue(self, name: str) -> RequestQueue:
        """A new worker thread for one client, closed with the service."""
        queue = RequestQueue(name)
        self._queues.add(queue)
        return queue

    def sampling_client_from_path(self, path: str, queue: RequestQueue) -> SamplingClient:
        """A client sampling the adapter saved at tinker ``path``."""
        checkpoint = self.store.load(path, with_optimizer=False)
        base = self.models.get(checkpoint.base_model)
        return SamplingClient(SamplingEngine.for_adapter(base, checkpoint.lora, checkpoint.adapter), queue)

    def close(self) -> None:
        """Stop accepting requests on every client's worker (queued ones still run)."""
        for queue in list(self._queues):
            queue.close()

"""The local backend: an in-process, Tinker-compatible service on torch and peft.

Same API and ``tinker.types`` as the hosted SDK::

    service = create_service_client("runs/_checkpoints")
    trainer = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=8)
    fwd = trainer.forward_backward(data, "importance_sampling")   # APIFuture, returned at once
    opt = trainer.optim_step(types.AdamParams(learning_rate=1e-4))
    await fwd; await opt                                           # or .result()
    sampler = await trainer.save_weights_and_get_sampling_client()
    response = await sampler.sample(prompt, 16, types.SamplingParams(max_tokens=64))

Importing this package imports torch.
"""

from .model.builtin_models import DEFAULT_BASE_MODEL
from .model.errors import LocalBadRequestError, LocalConflictError, LocalNotFoundError
from .model.tiny_model import TINY_MODEL
from .sampling_client import SamplingClient
from .service import ServiceClient, create_service_client
from .training_client import TrainingClient

__all__ = [
    "DEFAULT_BASE_MODEL",
    "LocalBadRequestError",
    "LocalConflictError",
    "LocalNotFoundError",
    "SamplingClient",
    "ServiceClient",
    "TINY_MODEL",
    "TrainingClient",
    "create_service_client",
]

"""One RL optimizer step: forward_backward with the run's loss and optim_step, and the step's training metrics."""

from __future__ import annotations

from typing import Any

import tinker

from minds_core.backends.retry import Backoff
from minds_core.config import TrainerConfig
from minds_core.contract.parts import CustomLoss
from minds_core.rl.step_metrics import sampler_train_kl
from minds_core.rl.topk_distill import distill_metrics
from minds_core.training.requests import adam_params, apply_update


async def train_step(
    client: Any, datums: list[tinker.Datum], loss: Any, cfg: TrainerConfig, step: int, backoff: Backoff
) -> dict[str, float]:
    """One optimizer step on ``datums`` with ``loss`` (a service loss name or a ``CustomLoss``); ``train/*`` and KL metrics."""
    adam = adam_params(cfg, step)

    def forward_backward() -> Any:
        if isinstance(loss, CustomLoss):
            return client.forward_backward_custom(datums, loss.fn)
        return client.forward_backward(datums, loss, dict(cfg.loss_fn_config) or None)

    result = await apply_update(forward_backward, lambda: client.optim_step(adam), step, backoff)
    metrics = {"train/learning_rate": adam.learning_rate, **{f"train/{k}": float(v) for k, v in (result.metrics or {}).items()}}
    metrics.update(sampler_train_kl(datums, result.loss_fn_outputs or []))
    metrics.update(distill_metrics(datums, result.loss_fn_outputs or []))
    return metrics

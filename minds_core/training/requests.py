"""What a training loop (RL or SFT) asks of the training client: one optimizer step, and checkpoints; transient failures retried.

When a request fails for good, the ``ServiceCallError`` records in
``intact_after`` the last step whose update the training state still holds
exactly, so that the loop can checkpoint it before the run ends.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import tinker

from minds_core.backends.retry import Backoff, ServiceCallError, call_service, send_now, settle
from minds_core.base.errors import MindsError
from minds_core.base.logs import get_logger
from minds_core.base.tracing import span
from minds_core.config import TrainerConfig
from minds_core.training.lr_schedules import learning_rate
from minds_core.training.run_directory import CheckpointRecord, RunDirectory

log = get_logger("training")


def adam_params(cfg: TrainerConfig, step: int) -> tinker.types.AdamParams:
    """The optimizer settings of ``step``: its scheduled learning rate and the configured AdamW constants."""
    return tinker.types.AdamParams(
        learning_rate=learning_rate(step, cfg.steps, cfg.learning_rate, cfg.lr_schedule, cfg.lr_warmup_steps, cfg.lr_min_ratio),
        beta1=cfg.beta1,
        beta2=cfg.beta2,
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        grad_clip_norm=cfg.grad_clip_norm,
    )


async def apply_update(
    forward_backward: Callable[[], Awaitable[Any]], optim_step: Callable[[], Awaitable[Any]], step: int, backoff: Backoff
) -> Any:
    """Submit forward_backward and optim_step back to back, then await both; forward_backward's result.

    When forward_backward had to be sent again, the optim_step submitted with the
    failed try is let finish and a fresh one follows the gradients that did arrive.
    When either fails for good, the error's ``intact_after`` is ``step - 1``.
    """
    where = f"step {step}"
    first_backward = send_now(forward_backward)
    first_optim = send_now(optim_step)
    try:
        with span("forward_backward", step=step):
            result, tries = await call_service(where, "forward_backward", forward_backward, backoff, first_backward)
    except ServiceCallError as exc:
        await settle(first_optim, backoff)  # it had no gradients of this batch to apply
        exc.intact_after = step - 1
        raise
    if tries > 1:
        await settle(first_optim, backoff)
        first_optim = None
    try:
        with span("optim_step", step=step):
            await call_service(where, "optim_step", optim_step, backoff, first_optim)
    except ServiceCallError as exc:
        exc.intact_after = step - 1
        raise
    return result


async def save_checkpoint(client: Any, step: int, name: str, backoff: Backoff, *, with_sampler: bool) -> CheckpointRecord:
    """Save the state (weights + optimizer, to resume) as ``name``, and ``with_sampler`` the sampler weights too.

    Both requests are in flight together; the caller records the checkpoint in the run directory.
    """
    with span("checkpoint", step=step, name=name, sampler=with_sampler):
        return await _save_checkpoint(client, step, name, backoff, with_sampler)


async def _save_checkpoint(client: Any, step: int, name: str, backoff: Backoff, with_sampler: bool) -> CheckpointRecord:
    where = f"step {step}"
    save_state = lambda: client.save_state(name, overwrite=True)
    state = send_now(save_state)
    if with_sampler:
        save_sampler = lambda: client.save_weights_for_sampler(name)
        sampler = send_now(save_sampler)
    state_path = (await call_service(where, "save_state", save_state, backoff, state))[0].path
    sampler_path = None
    if with_sampler:
        sampler_path = (await call_service(where, "save_weights_for_sampler", save_sampler, backoff, sampler))[0].path
    log.info("checkpoint saved", step=step, path=state_path, sampler_path=sampler_path)
    return CheckpointRecord(step=step, state_path=state_path, sampler_path=sampler_path)


def step_checkpoint_name(step: int) -> str:
    """What a checkpoint of ``step`` is saved as (its sampler weights too): ``step-NNNNNN``."""
    return f"step-{step:06d}"


async def save_after_failure(client: Any, run: RunDirectory, intact_after: int | None, backoff: Backoff) -> int | None:
    """Checkpoint the state a request that failed for good left intact (``ServiceCallError.intact_after``), unless
    already saved, and record it in ``run``; the last checkpoint's step (None: none), which ``--resume`` continues after.

    A save that fails too is logged, and the last checkpoint before it stays the one to resume from.
    """
    last = run.last_checkpoint()
    if intact_after is None or intact_after < 0 or (last is not None and last.step >= intact_after):
        return last.step if last else None
    try:
        checkpoint = await save_checkpoint(client, intact_after, step_checkpoint_name(intact_after), backoff, with_sampler=True)
    except ServiceCallError as exc:
        log.warning("could not save a checkpoint after the failure", step=intact_after, error=str(exc))
        return last.step if last else None
    run.record_checkpoint(checkpoint)
    return checkpoint.step


def check_losses(losses: dict[str, float], step: int, run: RunDirectory) -> None:
    """A MindsError when a loss of ``step`` is NaN or infinite: the update diverged, and nothing of it is kept or logged."""
    bad = {key: value for key, value in losses.items() if not math.isfinite(value)}
    if not bad:
        return
    shown = ", ".join(f"{key} = {value}" for key, value in sorted(bad.items()))
    last = run.last_checkpoint()
    if last is None:
        then = "no checkpoint was saved: start a new run with a lower trainer.learning_rate"
    else:
        then = (
            f"the last checkpoint is step {last.step}: continue from it with a lower learning rate, "
            f"minds run --resume {run.path} --set trainer.learning_rate=..."
        )
    raise MindsError(f"step {step}: the loss is not finite ({shown}): training diverged; this step is not logged or saved; {then}")

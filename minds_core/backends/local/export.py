"""Exporting a checkpoint of the local store as a PEFT adapter's files (the local ``BackendExport``).

The adapter is put on its base model (float32 on the CPU: the exact adapter weights) and saved by peft
itself, so it loads without minds; ``minds export`` adds the provenance and model card, and merges.
"""

from __future__ import annotations

from pathlib import Path

from minds_core.base.errors import UsageError

from .model.errors import LocalBadRequestError, LocalNotFoundError
from .model.lora import attach_lora, load_adapter_state
from .model.models import BaseModelRegistry
from .model.placement import resolve_placement
from .training.checkpoints import CheckpointStore

__all__ = ["export_local"]


def export_local(checkpoint_root: Path, path: str, out: Path) -> str:
    """The adapter saved at tinker ``path`` in the store at ``checkpoint_root``, written by peft into ``out``;
    the base model's name. Raises ``UsageError`` for a checkpoint the store cannot load, saying why."""
    try:
        checkpoint = CheckpointStore(checkpoint_root).load(path, with_optimizer=False)
        base = BaseModelRegistry(resolve_placement("cpu")).get(checkpoint.base_model)  # float32 on the CPU: exact adapter weights
    except (LocalNotFoundError, LocalBadRequestError) as exc:
        raise UsageError(f"cannot export {path}: {exc}") from None
    model = attach_lora(base.model, checkpoint.lora, seed=0)
    load_adapter_state(model, checkpoint.adapter)
    model.save_pretrained(str(out), save_embedding_layers=False)  # the adapter only, as the store keeps it
    return checkpoint.base_model

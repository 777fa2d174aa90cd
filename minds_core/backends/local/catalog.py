"""What the SDK's ``RestClient`` reads about checkpoints, computed from a checkpoint root, as ``tinker.types``.

One module for both faces of the local backend: the in-process ``RestClient``
(``rest``) and ``minds serve``'s REST routes. Checkpoints are read from disk
(``CheckpointStore.metadata``), so runs of earlier services on the same root are
listed too; a training run is listed once it has saved a checkpoint, and expired
checkpoints are left out (each listing sweeps them away first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tinker import types

from .model.errors import LocalNotFoundError
from .training.checkpoints import METADATA_FILE, CheckpointStore, parse_path

__all__ = ["Catalog", "capabilities", "checkpoints_page", "training_runs_page"]

_TYPES: dict[str, types.CheckpointType] = {"weights": "training", "sampler_weights": "sampler", "external_weights": "external"}


def capabilities(context_lengths: Mapping[str, int | None]) -> types.GetServerCapabilitiesResponse:
    """The SDK's ``get_server_capabilities`` answer: each model (by name, with its context when known), trainable and sampleable."""
    return types.GetServerCapabilitiesResponse(
        supported_models=[
            types.SupportedModel(model_name=name, max_context_length=length, trainable=True, sampleable=True)
            for name, length in context_lengths.items()
        ]
    )


def checkpoints_page(found: Sequence[types.Checkpoint], limit: int, offset: int) -> types.CheckpointsListResponse:
    """``limit`` of ``found`` from ``offset`` on, with the cursor the SDK pages by."""
    return types.CheckpointsListResponse(checkpoints=list(found[offset : offset + limit]), cursor=_cursor(found, limit, offset))


def training_runs_page(runs: Sequence[types.TrainingRun], limit: int, offset: int) -> types.TrainingRunsResponse:
    """``limit`` of ``runs`` from ``offset`` on, with the cursor the SDK pages by."""
    return types.TrainingRunsResponse(training_runs=list(runs[offset : offset + limit]), cursor=_cursor(runs, limit, offset))


def _cursor(items: Sequence[Any], limit: int, offset: int) -> types.Cursor:
    return types.Cursor(offset=offset, limit=limit, total_count=len(items))


class Catalog:
    """Checkpoints and training runs of one ``CheckpointStore``, newest first."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store

    def checkpoints(self, run_id: str | None = None) -> list[types.Checkpoint]:
        """Every unexpired checkpoint (of ``run_id`` when given), newest first."""
        self.store.sweep()
        found = [_checkpoint(folder, meta) for folder, meta in self.store.metadata(run_id)]
        return sorted(found, key=lambda c: c.time, reverse=True)

    def user_checkpoints(self, limit: int, offset: int) -> types.CheckpointsListResponse:
        """One page of every run's checkpoints (``RestClient.list_user_checkpoints``)."""
        return checkpoints_page(self.checkpoints(), limit, offset)

    def training_run(self, run_id: str) -> types.TrainingRun:
        """The run as its checkpoints describe it; a 404 when it has none."""
        found = self.checkpoints(run_id)
        if not found:
            raise LocalNotFoundError(f"No training run {run_id!r} with checkpoints under {self.store.root}")
        return _training_run(run_id, found, self._found(found[0].tinker_path)[1], self.store.run_metadata(run_id))

    def training_runs(self, limit: int, offset: int) -> types.TrainingRunsResponse:
        """One page of the runs that have checkpoints, most recently saved first."""
        by_run: dict[str, list[types.Checkpoint]] = {}
        for checkpoint in self.checkpoints():  # newest first, so each run's list is too
            by_run.setdefault(parse_path(checkpoint.tinker_path)[0], []).append(checkpoint)
        runs = [
            _training_run(run_id, found, self._found(found[0].tinker_path)[1], self.store.run_metadata(run_id))
            for run_id, found in by_run.items()
        ]
        return training_runs_page(runs, limit, offset)

    def weights_info(self, tinker_path: str) -> types.WeightsInfoResponse:
        """Base model and LoRA settings of the checkpoint at ``tinker_path``."""
        meta = self._found(tinker_path)[1]
        lora = meta["lora"]
        return types.WeightsInfoResponse(
            base_model=meta["base_model"],
            is_lora=True,
            lora_rank=lora.get("rank"),
            train_unembed=lora.get("train_unembed"),
            train_mlp=lora.get("train_mlp"),
            train_attn=lora.get("train_attn"),
        )

    def checkpoint(self, tinker_path: str) -> types.Checkpoint:
        """The checkpoint at ``tinker_path`` as listings show it; a 404 when there is none (or it expired)."""
        return _checkpoint(*self._found(tinker_path))

    def files(self, tinker_path: str) -> dict[str, Path]:
        """The checkpoint's files as a download hands them out, by their path relative to its folder (minds' record left out)."""
        folder = self._found(tinker_path)[0]
        found = sorted(p for p in folder.rglob("*") if p.is_file() and p != folder / METADATA_FILE)
        return {str(p.relative_to(folder)): p for p in found}

    def delete(self, run_id: str, checkpoint_id: str) -> None:
        """Remove a run's checkpoint (``checkpoint_id`` as listed: ``<kind>/<name>``, e.g. ``weights/step-10``)."""
        self.store.delete(f"tinker://{run_id}/{checkpoint_id}")

    def _found(self, tinker_path: str) -> tuple[Path, dict[str, Any]]:
        """The folder and metadata of the checkpoint at ``tinker_path``; a 404 when there is none (or it expired)."""
        run_id, kind, name = parse_path(tinker_path)
        folder = self.store.root / run_id / kind / name
        for found, meta in self.store.metadata(run_id):
            if found == folder:
                return folder, meta
        raise LocalNotFoundError(f"No checkpoint at {tinker_path} (or it has expired)")


def _checkpoint(folder: Path, meta: dict[str, Any]) -> types.Checkpoint:
    kind = folder.parent.name
    expires_at = meta.get("expires_at")
    return types.Checkpoint(
        checkpoint_id=f"{kind}/{folder.name}",
        checkpoint_type=_TYPES[kind],
        time=datetime.fromisoformat(meta["created_at"]),
        tinker_path=meta["path"],
        size_bytes=sum(p.stat().st_size for p in folder.iterdir() if p.is_file()),
        user_metadata=meta.get("user_metadata") or None,
        expires_at=None if expires_at is None else datetime.fromisoformat(expires_at).astimezone(UTC),
    )


def _training_run(
    run_id: str, checkpoints: list[types.Checkpoint], newest: dict[str, Any], user_metadata: dict[str, str]
) -> types.TrainingRun:
    """A run described by its checkpoints (newest first), the newest one's metadata and the run's ``user_metadata``."""
    return types.TrainingRun(
        training_run_id=run_id,
        base_model=newest["base_model"],
        model_owner="local",
        is_lora=True,
        lora_rank=newest["lora"].get("rank"),
        last_request_time=checkpoints[0].time,
        last_checkpoint=next((c for c in checkpoints if c.checkpoint_type == "training"), None),
        last_sampler_checkpoint=next((c for c in checkpoints if c.checkpoint_type == "sampler"), None),
        user_metadata=user_metadata or None,
    )

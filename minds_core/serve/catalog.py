"""The RestClient's read-only views of a checkpoint root: checkpoints and the training runs that saved them.

Checkpoints are read from disk (``<root>/<run id>/<weights|sampler_weights>/<name>/minds_checkpoint.json``,
as the local backend writes them), so runs of earlier server lifetimes on the same
``--checkpoint-root`` are listed too. A training run is listed once it has saved a checkpoint.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from tinker import types

from .errors import NotFound

__all__ = ["Catalog"]

_META = "minds_checkpoint.json"
_TYPES: dict[str, types.CheckpointType] = {"weights": "training", "sampler_weights": "sampler"}


class Catalog:
    """Checkpoints and training runs under ``root``, newest first."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def checkpoints(self, run_id: str | None = None) -> list[types.Checkpoint]:
        found = []
        for meta_path in self.root.glob(f"{_glob_segment(run_id)}/*/*/{_META}"):
            kind = meta_path.parent.parent.name
            if kind not in _TYPES:
                continue
            meta = json.loads(meta_path.read_text())
            found.append(
                types.Checkpoint(
                    checkpoint_id=f"{kind}/{meta_path.parent.name}",
                    checkpoint_type=_TYPES[kind],
                    time=datetime.fromisoformat(meta["created_at"]),
                    tinker_path=meta["path"],
                    size_bytes=sum(p.stat().st_size for p in meta_path.parent.iterdir() if p.is_file()),
                    user_metadata=meta.get("user_metadata") or None,
                )
            )
        return sorted(found, key=lambda c: c.time, reverse=True)

    def training_run(self, run_id: str) -> types.TrainingRun:
        checkpoints = self.checkpoints(run_id)
        if not checkpoints:
            raise NotFound(f"No training run {run_id!r} with checkpoints under this server's --checkpoint-root")
        newest = checkpoints[0]
        meta = json.loads((self.root / run_id / newest.checkpoint_id / _META).read_text())
        return types.TrainingRun(
            training_run_id=run_id,
            base_model=meta["base_model"],
            model_owner="local",
            is_lora=True,
            lora_rank=meta["lora"].get("rank"),
            last_request_time=newest.time,
            last_checkpoint=next((c for c in checkpoints if c.checkpoint_type == "training"), None),
            last_sampler_checkpoint=next((c for c in checkpoints if c.checkpoint_type == "sampler"), None),
        )

    def training_runs(self, limit: int, offset: int) -> types.TrainingRunsResponse:
        ids = sorted({c.tinker_path.removeprefix("tinker://").split("/")[0] for c in self.checkpoints()})
        runs = sorted((self.training_run(i) for i in ids), key=lambda r: r.last_request_time, reverse=True)
        return types.TrainingRunsResponse(
            training_runs=runs[offset : offset + limit],
            cursor=types.Cursor(offset=offset, limit=limit, total_count=len(runs)),
        )


def _glob_segment(run_id: str | None) -> str:
    if run_id is None:
        return "*"
    if not run_id or "/" in run_id or run_id.startswith(".") or any(c in run_id for c in "*?["):
        raise NotFound(f"Invalid training run id {run_id!r}")
    return run_id

"""The wandb sink: only when installed and configured (metrics.wandb_project)."""

from __future__ import annotations

from typing import Any

from minds_core.config import RunConfig, redact, to_dict
from minds_core.errors import UsageError


class WandbSink:
    """Logs each step's record to a Weights & Biases run."""

    def __init__(self, config: RunConfig) -> None:
        if not config.metrics.wandb_project:
            raise UsageError('metric sink "wandb" needs metrics.wandb_project (e.g. --set metrics.wandb_project=my-project)')
        try:
            import wandb
        except ImportError:
            raise UsageError('metric sink "wandb" needs the wandb package: pip install "minds-core[wandb]"') from None
        self.run = wandb.init(
            project=config.metrics.wandb_project,
            name=config.metrics.wandb_run_name or config.name,
            config=redact(to_dict(config)),
        )

    def write(self, record: dict[str, Any]) -> None:
        self.run.log(record, step=int(record["step"]))

    def close(self, summary: dict[str, Any]) -> None:
        self.run.summary.update(summary)
        self.run.finish()

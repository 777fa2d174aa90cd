"""The run directory: resolved config, metrics/rollouts/checkpoint logs, and resume.

``runs/<name>/`` holds ``config.yaml`` (secrets redacted), ``metrics.jsonl``
(one line per step), ``rollouts.jsonl`` (a few groups per step) and
``checkpoints.jsonl`` (one line per saved state, written only after the state
is on the service). Resuming continues after the last checkpoint; lines of
later steps (written before a crash) are cut so no step is duplicated or lost.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import attrs

from minds_core.config import RunConfig, dump_yaml
from minds_core.errors import UsageError
from minds_core.sinks.jsonl import METRICS_FILE, append_line

CONFIG_FILE = "config.yaml"
ROLLOUTS_FILE = "rollouts.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"


@attrs.frozen
class Checkpoint:
    """A saved training state after ``step``: weights + optimizer, and sampler weights.

    ``state_path`` resumes training; ``sampler_path`` is what
    ``create_sampling_client(model_path=...)`` takes to sample from the adapter.
    """

    step: int
    state_path: str
    sampler_path: str | None = None


def resume_config_path(run_dir: Path) -> Path:
    """The config of an existing run, or a clear error."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise UsageError(f"--resume {run_dir}: not a minds run directory (no {CONFIG_FILE}); runs live under runs/<name>/")
    return path


def default_run_name(config: RunConfig) -> str:
    """``<first env>-<UTC time>``, safe as a folder name."""
    env_ids = [e.id for e in config.environments] or ["run"]
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(env_ids[0]).name)
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


class RunDirectory:
    """Reads and writes one run's files."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @staticmethod
    def ensure_new(config: RunConfig) -> None:
        """A UsageError when the run's directory already holds a run."""
        path = Path(config.runs_dir) / config.name
        if (path / CONFIG_FILE).exists():
            raise UsageError(f"run directory {path} already exists: pick another --name, or continue it with --resume {path}")

    @classmethod
    def create(cls, config: RunConfig) -> RunDirectory:
        """A new run directory holding the resolved config."""
        cls.ensure_new(config)
        path = Path(config.runs_dir) / config.name
        path.mkdir(parents=True, exist_ok=True)
        run = cls(path)
        run.write_config(config)
        return run

    @classmethod
    def resume(cls, path: Path, config: RunConfig, next_step: int) -> RunDirectory:
        """An existing run continued at ``next_step``: later lines are cut, the config (with overrides) rewritten."""
        run = cls(path)
        run.truncate_after(next_step)
        run.write_config(config)
        return run

    def write_config(self, config: RunConfig) -> None:
        tmp = self.path / f".{CONFIG_FILE}.tmp"
        tmp.write_text(dump_yaml(config), encoding="utf-8")
        os.replace(tmp, self.path / CONFIG_FILE)

    def checkpoints(self) -> list[Checkpoint]:
        return [Checkpoint(**row) for row in read_jsonl(self.path / CHECKPOINTS_FILE)]

    def last_checkpoint(self) -> Checkpoint | None:
        saved = self.checkpoints()
        return saved[-1] if saved else None

    def record_checkpoint(self, checkpoint: Checkpoint) -> None:
        append_line(self.path / CHECKPOINTS_FILE, attrs.asdict(checkpoint))

    def log_rollouts(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            append_line(self.path / ROLLOUTS_FILE, record)

    def truncate_after(self, next_step: int) -> None:
        """Drop metric and rollout lines of steps >= next_step (and torn last lines)."""
        for name in (METRICS_FILE, ROLLOUTS_FILE):
            path = self.path / name
            if not path.exists():
                continue
            kept = [row for row in read_jsonl(path) if int(row.get("step", -1)) < next_step]
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in kept), encoding="utf-8")
            os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a jsonl file ([] when missing); a torn line (killed mid-write) is skipped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows

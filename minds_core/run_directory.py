"""The run directory: resolved config, metrics/rollouts/checkpoint logs, and resume.

``runs/<name>/`` holds ``config.yaml`` (secrets redacted), ``metrics.jsonl``
(one line per step), ``rollouts.jsonl`` (a few groups per step),
``checkpoints.jsonl`` (one line per saved state, written only after the state
is on the service) and ``resumes.jsonl`` (one line per resume: its step and the
settings it changed). A run claims its folder atomically: two runs never share
one. Resuming continues after the last checkpoint; lines of later steps
(written before a crash) are cut so no step is duplicated or lost. A resume may
change how a run proceeds (steps, logging, concurrency, ...) but not what it
is (``FIXED_ON_RESUME``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

import attrs

from minds_core.config import RunConfig, build_config, dump_yaml, read_config_file, to_dict
from minds_core.config.masking import mask_data
from minds_core.config.secrets import is_secret_key, redact, shown_value
from minds_core.errors import UsageError

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
ROLLOUTS_FILE = "rollouts.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"
RESUMES_FILE = "resumes.jsonl"

#: Config keys (and everything under them) that make a run what it is: a resume may not change them.
FIXED_ON_RESUME = ("env", "envs", "model", "backend", "tinker.base_url", "seed", "name", "runs_dir")


@attrs.frozen
class CheckpointRecord:
    """One line of ``checkpoints.jsonl``: where the training state saved after ``step`` lives on the service.

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
    """``<first env>-<UTC time>-<6 random hex digits>``, safe as a folder name; runs started in the same second differ."""
    env_ids = [e.id for e in config.environments] or ["run"]
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(env_ids[0]).name)
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"


def _exists_message(path: Path) -> str:
    return f"run directory {path} already exists: pick another --name, or continue that run with --resume {path}"


def check_resume_changes(run_dir: Path, config: RunConfig) -> dict[str, tuple[Any, Any]]:
    """The settings ``config`` changes from the run saved in ``run_dir``; a UsageError when one is in FIXED_ON_RESUME.

    Secret-named keys are not compared: secrets are never saved, so they are given again.
    """
    changes = config_changes(_saved_config(run_dir), config)
    fixed = {key: change for key, change in changes.items() if _is_fixed(key)}
    if fixed:
        lines = "\n".join(f"  - {key}: {_show(key, old)} -> {_show(key, new)}" for key, (old, new) in fixed.items())
        raise UsageError(
            f"--resume {run_dir}: a resumed run cannot change what it trains (the task, model, LoRA rank or backend):\n{lines}\n"
            "drop these overrides, or start a new run with them (minds run ... --name NEW_NAME)"
        )
    return changes


def config_changes(old: RunConfig, new: RunConfig) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (old, new) for every setting that differs; secret-named keys are left out."""
    before, after = _flatten(to_dict(old)), _flatten(to_dict(new))
    return {
        key: (before.get(key), after.get(key))
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key) and not any(is_secret_key(part) for part in re.split(r"[.\[\]]+", key) if part)
    }


def _saved_config(run_dir: Path) -> RunConfig:
    path = resume_config_path(run_dir)
    return build_config(read_config_file(path), source=str(path))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and (value or not prefix):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}" if not prefix else f"{prefix}.{key}"))
        return out
    return {prefix: value}


def _is_fixed(key: str) -> bool:
    return any(key == root or key.startswith((f"{root}.", f"{root}[")) for root in FIXED_ON_RESUME)


def _show(key: str, value: Any) -> str:
    return shown_value(key.rpartition(".")[2], value)


class RunDirectory:
    """Reads and writes one run's files."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: How messages name the folder (``minds run --resume ...``): relative to the working directory when inside it.
        self.shown = path.relative_to(Path.cwd()) if path.is_absolute() and path.is_relative_to(Path.cwd()) else path

    @staticmethod
    def ensure_new(config: RunConfig) -> None:
        """A UsageError when the run's directory already exists (checked early; ``create`` claims it atomically)."""
        path = Path(config.runs_dir) / config.name
        if path.exists():
            raise UsageError(_exists_message(path))

    @classmethod
    def create(cls, config: RunConfig) -> RunDirectory:
        """Claim a new run directory (one mkdir: of two runs racing for a name, exactly one wins) and write the config."""
        path = Path(config.runs_dir) / config.name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir()
        except FileExistsError:
            raise UsageError(_exists_message(path)) from None
        run = cls(path)
        run.write_config(config)
        return run

    @classmethod
    def resume(cls, path: Path, config: RunConfig, next_step: int) -> RunDirectory:
        """An existing run continued at ``next_step``: later lines are cut, the changed settings recorded, the config rewritten."""
        run = cls(path)
        changes = config_changes(_saved_config(path), config)
        run.truncate_after(next_step)
        append_line(path / RESUMES_FILE, {"step": next_step, "time": time.time(), "changed": redact({k: list(v) for k, v in changes.items()})})
        run.write_config(config)
        return run

    def write_config(self, config: RunConfig) -> None:
        tmp = self.path / f".{CONFIG_FILE}.tmp"
        tmp.write_text(dump_yaml(config), encoding="utf-8")
        os.replace(tmp, self.path / CONFIG_FILE)

    def checkpoints(self) -> list[CheckpointRecord]:
        return [CheckpointRecord(**row) for row in read_jsonl(self.path / CHECKPOINTS_FILE)]

    def last_checkpoint(self) -> CheckpointRecord | None:
        saved = self.checkpoints()
        return saved[-1] if saved else None

    def record_checkpoint(self, checkpoint: CheckpointRecord) -> None:
        """Append ``checkpoint``; earlier lines naming the same state (a rolling slot now overwritten) are dropped."""
        path = self.path / CHECKPOINTS_FILE
        rows = read_jsonl(path)
        if any(row.get("state_path") == checkpoint.state_path for row in rows):
            kept = [row for row in rows if row.get("state_path") != checkpoint.state_path]
            _rewrite_jsonl(path, kept)
        append_line(path, attrs.asdict(checkpoint))

    def log_metrics(self, record: dict[str, Any]) -> None:
        """Append one step's metrics to metrics.jsonl, durable when this returns."""
        append_line(self.path / METRICS_FILE, record)

    def log_rollouts(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            append_line(self.path / ROLLOUTS_FILE, record)

    def truncate_after(self, next_step: int) -> None:
        """Drop metric and rollout lines of steps >= next_step (and torn last lines)."""
        for name in (METRICS_FILE, ROLLOUTS_FILE):
            path = self.path / name
            if not path.exists():
                continue
            _rewrite_jsonl(path, [row for row in read_jsonl(path) if int(row.get("step", -1)) < next_step])


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line with a single write, flushed to disk (after a torn last line, on a new line); secrets masked."""
    line = json.dumps(mask_data(record), sort_keys=True, default=float) + "\n"
    if _ends_torn(path):
        line = "\n" + line
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def _ends_torn(path: Path) -> bool:
    """Whether the file's last line lacks its newline (a write cut short by a kill)."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) != b"\n"


def _rewrite_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replace a jsonl file's lines at once (a kill leaves the old file or the new one)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(mask_data(row), sort_keys=True) + "\n" for row in rows), encoding="utf-8")
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

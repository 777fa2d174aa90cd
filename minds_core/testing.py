"""Helpers for testing environments and plugins: a short ``minds run`` and what it wrote."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from minds_core.checkpoint import CHECKPOINTS_FILE, ROLLOUTS_FILE, read_jsonl
from minds_core.cli import main
from minds_core.sinks.jsonl import METRICS_FILE


@attrs.frozen
class RunResult:
    """The exit code of a run and the rows of its metrics, rollouts and checkpoints files."""

    exit_code: int
    run_dir: Path
    metrics: list[dict[str, Any]]
    rollouts: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]

    @property
    def steps(self) -> list[int]:
        return [row["step"] for row in self.metrics]

    @property
    def trained(self) -> bool:
        """Whether any step trained on at least one datum (a run where none did exits with code 1)."""
        return any(row.get("train/datums", 0) > 0 for row in self.metrics)

    @property
    def expected_exit_code(self) -> int:
        """0 when some step trained, 1 when every step trained on nothing (the untrained tiny model's
        replies often score alike within every group)."""
        return 0 if self.trained else 1


def run_minds(
    *args: str, runs_dir: Path, name: str = "test", overrides: Sequence[str] = (), quiet: bool = True
) -> RunResult:
    """Run ``minds run ARGS --name NAME --set runs_dir=... --set OVERRIDE ...`` in this process.

    ``quiet`` keeps only the jsonl sink (no progress bar) unless an override says otherwise.
    """
    sets = ["metrics.sinks=[jsonl]"] if quiet else []
    argv = ["run", *args, "--name", name, "--set", f"runs_dir={runs_dir}"]
    for assignment in [*sets, *overrides]:
        argv += ["--set", assignment]
    code = main(argv)
    run_dir = Path(runs_dir) / name
    return RunResult(
        code,
        run_dir,
        read_jsonl(run_dir / METRICS_FILE),
        read_jsonl(run_dir / ROLLOUTS_FILE),
        read_jsonl(run_dir / CHECKPOINTS_FILE),
    )

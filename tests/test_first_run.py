"""A newcomer's first run learns: `make demo` as written, and each seed environment's demo run as its README says."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MINDS = Path(sys.executable).with_name("minds")


def rises_clearly(rewards: list[float], window: int = 5) -> bool:
    """The mean of the last ``window`` step rewards is above the first ``window``'s by two standard errors or more."""
    first, last = rewards[:window], rewards[-window:]
    error = (statistics.variance(first) / window + statistics.variance(last) / window) ** 0.5
    return statistics.mean(last) - statistics.mean(first) >= 2 * error


def test_rises_clearly_tells_a_rise_from_noise() -> None:
    assert rises_clearly([-10, -8, -9, -7, -8, -1, 0, 1, 0, 1])
    assert not rises_clearly([-10, 0, -10, 0, -10, 0, -10, 0, -10, 0])
    assert not rises_clearly([1, 1.1, 0.9, 1, 1, 1, 0.9, 1.1, 1, 1])


def _demo_command() -> list[str]:
    """The command `make demo` runs, from the Makefile itself (so a change there is what this test runs)."""
    match = re.search(r"^demo:.*\n\t\$\(VENV\)/bin/minds (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, "the Makefile's demo target runs $(VENV)/bin/minds ..."
    return match.group(1).split()


@pytest.mark.slow
def test_make_demo_trains_and_its_reward_rises(tmp_path: Path) -> None:
    """`make demo` on the embedded default model: at least 18 of 20 steps train and the reward clearly rises."""
    command = _demo_command()
    assert command == ["run", "--env", "ghost_trace"]  # with defaults: the embedded model, 20 steps
    done = subprocess.run([str(MINDS), *command], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(next(line for line in done.stderr.splitlines() if line.startswith('{"event": "summary"')))
    assert summary["steps"] == 20 and summary["trained_steps"] >= 18, summary
    run_dir = Path(summary["run_dir"])
    assert run_dir.parent == tmp_path / "runs"  # the command's own default folder
    rewards = [json.loads(line)["reward/mean"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rewards) == 20 and rises_clearly(rewards), rewards


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "rises"),
    [("self_prediction", True), ("gradient_prophet", False), ("entropy_intuition", True)],  # as each README says
)
def test_each_seed_environment_trains_on_the_embedded_model_with_its_defaults(env: str, rises: bool, tmp_path: Path) -> None:
    """`minds run --env ENV` as each plugin's README runs it: at least 18 of its 20 steps train, none fails, and the
    reward clearly rises where the README says it does."""
    from minds_core.testing import run_minds

    run = run_minds("--env", env, runs_dir=tmp_path, name=env)
    assert run.exit_code == 0, run.error
    rewards = [row["reward/mean"] for row in run.metrics]
    trained = [row for row in run.metrics if row["train/datums"] > 0]
    assert len(run.metrics) == 20 and len(trained) >= 18, rewards
    assert sum(row["rollouts/failed"] for row in run.metrics) == 0
    assert rises_clearly(rewards) or not rises, rewards

"""`minds run configs/ghost_trace.toml` trains a few steps on the local backend."""

import json
from pathlib import Path

import pytest

from minds_core.cli import main
from minds_ghost_trace.environment import REWARD_NAME
from minds_ghost_trace.parsing import parse_code
from minds_ghost_trace.reward import INVALID_PENALTY, OFFSET

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "ghost_trace.toml"


def test_minds_run_trains_ghost_trace(tmp_path: Path) -> None:
    code = main(
        [
            "run", str(CONFIG), "--steps", "2", "--name", "gt",
            "--set", f"runs_dir={tmp_path}",
            "--set", "env.args.num_examples=8",
            "--set", "trainer.group_size=4",
            "--set", "trainer.groups_per_batch=2",
            "--set", "sampling.max_tokens=16",
            "--set", "metrics.rollouts_per_step=2",
            "--set", 'metrics.sinks=["jsonl"]',
        ]
    )  # fmt: skip
    assert code == 0
    run_dir = tmp_path / "gt"
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1]
    for step in steps:
        assert step["rollouts/failed"] == 0
        assert f"env/ghost_trace/reward/{REWARD_NAME}" in step
    groups = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    rollouts = [r for g in groups for r in g["rollouts"]]
    assert len(rollouts) == 2 * 2 * 4
    for rollout in rollouts:
        (completion,) = rollout["completion"]
        if parse_code(completion) is None:
            assert rollout["reward"] == INVALID_PENALTY
        else:
            assert rollout["reward"] < OFFSET

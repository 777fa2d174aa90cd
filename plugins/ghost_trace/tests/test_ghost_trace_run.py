"""`minds run configs/ghost_trace.toml` trains a few steps on the local backend."""

from pathlib import Path

import pytest

from minds_core.testing import run_minds
from minds_ghost_trace.environment import REWARD_NAME
from minds_ghost_trace.parsing import parse_code
from minds_ghost_trace.reward import INVALID_PENALTY, OFFSET

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "ghost_trace.toml"


def test_minds_run_trains_ghost_trace(tmp_path: Path) -> None:
    run = run_minds(
        str(CONFIG), "--steps", "2", runs_dir=tmp_path, name="gt",
        overrides=["env.args.num_examples=8", "trainer.group_size=4", "trainer.groups_per_batch=2",
                   "sampling.max_tokens=16", "metrics.rollouts_per_step=2"],
    )  # fmt: skip
    run.assert_trained_unless_said_why()
    assert run.steps == [0, 1]
    for step in run.metrics:
        assert step["rollouts/failed"] == 0
        assert f"env/ghost_trace/reward/{REWARD_NAME}" in step
    groups = run.rollouts
    rollouts = [r for g in groups for r in g["rollouts"]]
    assert len(rollouts) == 2 * 2 * 4
    for rollout in rollouts:
        (completion,) = rollout["completion"]
        if parse_code(completion) is None:
            assert rollout["reward"] == INVALID_PENALTY
        else:
            assert rollout["reward"] < OFFSET

"""`minds run configs/ghost_trace.toml` trains a few steps on the local backend."""

from pathlib import Path

import pytest

from minds_core.testing import run_minds
from minds_ghost_trace.environment import REWARD_NAME
from minds_ghost_trace.parsing import parse_code
from minds_ghost_trace.reward import INVALID_PENALTY, OFFSET, VALID_FLOOR

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "ghost_trace.toml"


@pytest.mark.slow
def test_minds_run_trains_ghost_trace(tmp_path: Path) -> None:
    # Eight long, hot replies a task: about one in six holds five integers (a valid code, scored by the policy's
    # log-probs), the rest score the -10 penalty, so rewards differ within a group and the run trains.
    run = run_minds(
        str(CONFIG), "--steps", "2", runs_dir=tmp_path, name="gt",
        overrides=["env.args.num_examples=8", "trainer.group_size=8", "trainer.groups_per_batch=2",
                   "sampling.max_tokens=128", "sampling.temperature=1.5", "metrics.rollouts_per_step=2"],
    )  # fmt: skip
    run.assert_trained()
    assert run.steps == [0, 1]
    for step in run.metrics:
        assert step["rollouts/failed"] == 0
        assert f"env/ghost_trace/reward/{REWARD_NAME}" in step
    groups = run.rollouts
    rollouts = [r for g in groups for r in g["rollouts"]]
    assert len(rollouts) == 2 * 2 * 8
    valid = [r for r in rollouts if parse_code(r["completion"][0]) is not None]
    assert valid  # the reward that trained came from codes the policy decoded
    for rollout in rollouts:
        (completion,) = rollout["completion"]
        if parse_code(completion) is None:
            assert rollout["reward"] == INVALID_PENALTY
        else:
            assert VALID_FLOOR <= rollout["reward"] < OFFSET

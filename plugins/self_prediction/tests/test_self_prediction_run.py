"""`minds run configs/self_prediction.toml` trains a few steps; logged rewards match the formula."""

from pathlib import Path

import pytest

from minds_core.testing import run_minds
from minds_self_prediction.problems import Problem
from minds_self_prediction.scoring import accuracy_reward, calibration_reward, format_reward

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "self_prediction.toml"


def _expected_reward(question: str, completion: str) -> float:
    a, op, b = question.removeprefix("What is ").removesuffix("?").split()
    problem = Problem(int(a), op, int(b))
    answer, info = str(problem.answer), {"aliases": problem.aliases}
    return (
        0.2 * format_reward(completion)
        + 0.5 * accuracy_reward(completion, answer, info)
        + 0.3 * calibration_reward(completion, answer, info)
    )


def test_minds_run_trains_self_prediction(tmp_path: Path) -> None:
    run = run_minds(
        str(CONFIG), "--steps", "2", runs_dir=tmp_path, name="sp",
        overrides=["env.args.num_examples=16", "trainer.group_size=4", "trainer.groups_per_batch=2",
                   "sampling.max_tokens=24"],
    )  # fmt: skip
    run.assert_trained_unless_said_why()
    assert run.steps == [0, 1]
    for step in run.metrics:
        assert step["rollouts/failed"] == 0
        for part in ("format", "accuracy", "calibration"):
            assert f"env/self_prediction/reward/self_prediction.{part}" in step
    groups = run.rollouts
    assert groups
    for group in groups:
        for rollout in group["rollouts"]:
            (completion,) = rollout["completion"]
            assert rollout["reward"] == pytest.approx(_expected_reward(group["task"], completion))

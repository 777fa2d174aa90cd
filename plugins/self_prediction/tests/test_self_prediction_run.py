"""`minds run configs/self_prediction.toml` trains a few steps; logged rewards match the formula."""

import json
from pathlib import Path

import pytest

from minds_core.cli import main
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
    code = main(
        [
            "run", str(CONFIG), "--steps", "2", "--name", "sp",
            "--set", f"runs_dir={tmp_path}",
            "--set", "env.args.num_examples=16",
            "--set", "trainer.group_size=4",
            "--set", "trainer.groups_per_batch=2",
            "--set", "sampling.max_tokens=24",
            "--set", 'metrics.sinks=["jsonl"]',
        ]
    )  # fmt: skip
    assert code == 0
    run_dir = tmp_path / "sp"
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1]
    for step in steps:
        assert step["rollouts/failed"] == 0
        for part in ("format", "accuracy", "calibration"):
            assert f"env/self_prediction/reward/self_prediction.{part}" in step
    groups = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert groups
    for group in groups:
        for rollout in group["rollouts"]:
            completion = rollout["completion"][-1]  # earlier entries: the worked example in the prompt
            assert rollout["reward"] == pytest.approx(_expected_reward(group["task"], completion))

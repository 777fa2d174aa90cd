"""`minds run configs/self_prediction.toml` trains a few steps; logged rewards match the formula."""

from pathlib import Path

import pytest

from minds_core import Task
from minds_core.testing import run_minds, scripted_pick, scripted_replies_plugin
from minds_self_prediction.environment import load_environment
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


def scripted_answer(task: Task, reply: str) -> str:
    """TEST-ONLY scripted policy: the answer a trained model might give, picked by the tiny model's reply.

    The untrained tiny model never writes ``FINAL ANSWER:`` / ``CONFIDENCE:``, so all its replies score 0.225.
    """
    return scripted_pick(reply, [
        f"FINAL ANSWER: {task.answer}\nCONFIDENCE: 0.9",  # right and sure
        f"FINAL ANSWER: {task.answer}\nCONFIDENCE: 0.2",  # right, unsure
        "FINAL ANSWER: seven\nCONFIDENCE: 0.8",  # wrong and sure
        "<think>no idea</think>\nFINAL ANSWER: 0.5\nCONFIDENCE: 0.1",  # most likely wrong, unsure
        reply,  # the model's own
    ])  # fmt: skip


@pytest.mark.slow
def test_minds_run_trains_self_prediction(tmp_path: Path, minds_plugin) -> None:
    minds_plugin(scripted_replies_plugin("scripted_self_prediction", "self_prediction", scripted_answer))
    run = run_minds(
        str(CONFIG), "--steps", "2", runs_dir=tmp_path, name="sp",
        overrides=["env.id=scripted_self_prediction", "env.args.num_examples=16", "trainer.group_size=4",
                   "trainer.groups_per_batch=2", "sampling.max_tokens=24"],
    )  # fmt: skip
    run.assert_trained()
    assert run.steps == [0, 1]
    for step in run.metrics:
        assert step["rollouts/failed"] == 0
        for part in ("format", "accuracy", "calibration"):  # the config's rubric, applied to the wrapped environment
            assert f"env/scripted_self_prediction/reward/self_prediction.{part}" in step
    groups = run.rollouts
    assert groups
    tasks = {task.id: task for task in load_environment(num_examples=16).tasks("train")}
    for group in groups:
        task = tasks[group["task"]]
        for rollout in group["rollouts"]:
            (completion,) = rollout["completion"]
            assert rollout["reward"] == pytest.approx(_expected_reward(group["task"], scripted_answer(task, completion)))

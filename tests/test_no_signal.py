"""A run that trains on nothing says so: one warning per empty step, exit 1 and the reason when no step trained."""

from __future__ import annotations

from pathlib import Path

import pytest

from minds_core.contract.environment import Task
from minds_core.episodes.conversation import Conversation
from minds_core.episodes.groups import Group, Rollout
from minds_core.rl.outcome import TrainingOutcome, no_datum_reason
from minds_core.testing import run_minds

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

#: A seed-style environment (initial_observation + step) whose reward never depends on the reply.
CONSTANT_ENV = """
class Constant:
    def initial_observation(self):
        return "Say anything."

    def step(self, text):
        return {"reward": REWARD}


def load_environment(**kwargs):
    return Constant()
"""

#: One whose grader always fails.
FAILING_ENV = """
class Offline:
    def initial_observation(self):
        return "Say anything."

    def step(self, text):
        raise ConnectionError("grader offline")


def load_environment(**kwargs):
    return Offline()
"""

TINY = ["--backend", "local", "--steps", "2"]
SMALL = ["trainer.group_size=6", "trainer.groups_per_batch=2", "sampling.max_tokens=4", "rollout.retries=0"]


def _env(tmp_path: Path, name: str, source: str) -> str:
    path = tmp_path / f"{name}_{tmp_path.name}.py"  # one module name per test: they are imported by name
    path.write_text(source)
    return str(path)


@pytest.mark.parametrize("reward", ["1 / 3", "0.1"])
@pytest.mark.slow
def test_a_run_whose_rewards_are_all_equal_ends_with_exit_1_and_the_reason(tmp_path: Path, capfd, reward: str) -> None:
    env = _env(tmp_path, "constant_env", CONSTANT_ENV.replace("REWARD", reward))
    run = run_minds("--env", env, *TINY, runs_dir=tmp_path / "runs", overrides=[*SMALL, "metrics.sinks=[console]"], quiet=False)
    captured = capfd.readouterr()
    assert run.exit_code == 1
    assert run.steps == [0, 1]  # every step ran and was recorded
    for step in run.metrics:
        assert step["train/datums"] == 0 and step["train/skipped"] == 1.0
        assert step["rollouts/failed"] == 0 and step["reward/std"] == 0.0
        assert step["advantage/min"] == step["advantage/max"] == 0.0  # exactly, not -5.55e-17
    assert all(r["advantage"] == 0.0 for g in run.rollouts for r in g["rollouts"])
    assert "minds: error: no step trained: all rewards within each group were equal" in captured.err
    assert run.error.startswith("no step trained: all rewards within each group were equal")  # as RunResult keeps it
    run.assert_trained_unless_said_why()
    assert "(2 steps)" in captured.err
    assert captured.err.count("step trained on nothing") == 2  # one warning per step
    assert "not_trained" in captured.err  # the run summary table says it too
    assert len(run.checkpoints) == 1  # the final checkpoint is still written


@pytest.mark.slow
def test_a_run_whose_rollouts_all_fail_ends_with_exit_1_and_the_error(tmp_path: Path, capfd) -> None:
    env = _env(tmp_path, "failing_env", FAILING_ENV)
    run = run_minds("--env", env, *TINY, runs_dir=tmp_path / "runs", overrides=SMALL)
    err = capfd.readouterr().err
    assert run.exit_code == 1
    assert [m["rollouts/failed"] for m in run.metrics] == [12, 12]
    assert "no step trained: all 12 rollouts failed (first error: " in err and "grader offline" in err


@pytest.mark.slow
def test_a_run_where_one_step_trains_succeeds(tmp_path: Path) -> None:
    # reward depends on the reply length: different replies, different rewards
    step = "def step(self, text):\n        return {\"reward\": "
    varying = CONSTANT_ENV.replace(step + "REWARD}", step + "len(text) % 3}")
    env = _env(tmp_path, "varying_env", varying)
    run = run_minds("--env", env, *TINY, runs_dir=tmp_path / "runs", overrides=SMALL)
    run.assert_trained()


def _group(rewards: list[float | None], dropped: str | None = None) -> Group:
    def conversation() -> Conversation:
        return Conversation(renderer=None, sampler=None, params=None, max_total_tokens=8)

    rollouts = [Rollout(conversation(), reward=r) if r is not None else Rollout(conversation(), error="TimeoutError: slow grader") for r in rewards]
    return Group("env", Task(prompt="p"), rollouts, dropped)


@pytest.mark.parametrize(
    ("groups", "reason"),
    [
        ([], "the batch had no rollouts"),
        ([_group([None, None]), _group([None])], "all 3 rollouts failed (first error: TimeoutError: slow grader)"),
        ([_group([1.0, None], "failures"), _group([0.0, 0.0], "constant")],
         "every group was dropped: 1 with more failed rollouts than max_failing_rollouts, 1 with equal rewards"),
        ([_group([0.5, 0.5]), _group([1.0, 1.0, None])], "all rewards within each group were equal (rewards seen: 0.5, 1)"),
        ([_group([0.0, 1.0])], "the advantage estimator (trainer.advantage) returned 0 for every rollout"),
        ([_group([0.5]), _group([1.0, None])], "group size 1: each task had one scored rollout"),
    ],
)  # fmt: skip
def test_the_reason_names_what_went_wrong(groups: list[Group], reason: str) -> None:
    assert reason in no_datum_reason(groups)


def test_a_run_with_one_trained_step_has_no_verdict() -> None:
    outcome = TrainingOutcome()
    outcome.record(0, 0, [_group([0.5, 0.5])])
    assert "all rewards within each group were equal" in outcome.summary()["not_trained"]
    outcome.record(1, 8, [])
    assert outcome.summary() == {"trained_steps": 1}

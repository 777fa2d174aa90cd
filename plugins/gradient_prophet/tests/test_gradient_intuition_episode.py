"""gradient_intuition around an inner environment: prompt, parsing and R_inner + alpha * closeness."""

import pytest
from attrs import evolve

from minds_core import Rubric, SingleTurnEnvironment, Task
from minds_core.base.errors import ConfigError
from minds_core.config import EnvConfig
from minds_core.contract.plugins import load_plugins
from minds_core.envs.loading import build_environment
from minds_gradient_prophet.intuition import GradientIntuitionEnvironment, load_gradient_intuition, prediction_reward
from minds_gradient_prophet.lessons import QA
from minds_gradient_prophet.policy_scores import MeasurementError
from minds_gradient_prophet.shadow import scoring_datum
from minds_gradient_prophet.trivia import TRIVIA

ALPHA = 0.35


def intuition_env(**args):
    """``load_gradient_intuition`` given what minds gives it: a way to build the inner environment."""
    registry = load_plugins().registry
    return load_gradient_intuition(lambda env_id, inner: build_environment(EnvConfig(id=env_id, args=dict(inner)), registry), **args)
LR = 1e-2


def color_env() -> SingleTurnEnvironment:
    """A small inner environment: 1 for the expected color, 0.25 for any other reply."""

    def exact(completion: str, answer: str) -> float:
        return 1.0 if completion.strip().lower() == answer else 0.25

    tasks = [Task(prompt="Name the color of a ripe tomato, in one word.", answer="red", id="tomato")]
    return SingleTurnEnvironment({"train": tasks}, Rubric([exact]), system_prompt="Be brief.")


def wrapped() -> GradientIntuitionEnvironment:
    return GradientIntuitionEnvironment(color_env(), ALPHA, LR, seed=0)


async def true_delta(policy, env: GradientIntuitionEnvironment, task: Task, answer: str) -> float:
    """Δ for (inner prompt, answer) and the task's probe, computed by hand on a fresh client."""
    ctx = policy.ctx
    inner_prompt = env.inner.episode(task.info["inner_task"], ctx).initial_observation()
    example = scoring_datum(ctx.renderer.prompt_tokens(inner_prompt), ctx.renderer.encode(answer))
    probe = QA(*task.info["probe"])
    probe_datum = scoring_datum(
        ctx.tokenizer.encode(probe.context), ctx.tokenizer.encode(probe.target, add_special_tokens=False)
    )
    return await policy.manual_one_step_delta(ctx.policy_checkpoint, example, probe_datum, LR)


async def test_the_prompt_is_the_inner_task_plus_the_prediction_task(policy):
    env = wrapped()
    (task,) = env.tasks("train")
    assert QA(*task.info["probe"]) in TRIVIA
    messages = await env.episode(task, policy.ctx).initial_observation()
    assert messages[0] == {"role": "system", "content": "Be brief."}
    text = messages[-1]["content"]
    assert text.startswith("Name the color of a ripe tomato, in one word.")
    assert task.info["probe"][0] in text and "PREDICTION:" in text and "ANSWER:" in text
    assert f"learning rate {LR:g}" in text


@pytest.mark.slow
async def test_reward_is_inner_reward_plus_alpha_times_prediction_closeness(policy):
    env = wrapped()
    (task,) = env.tasks("train")
    delta = await true_delta(policy, env, task, "red")
    episode = env.episode(task, policy.ctx)
    await episode.initial_observation()
    result = await episode.step(f"PREDICTION: {delta + 0.25!r}\nANSWER: red")
    assert result.reward == pytest.approx(1.0 + ALPHA * 0.75, abs=1e-4)
    assert result.metrics["gradient_intuition/inner_reward"] == 1.0
    assert result.metrics["gradient_intuition/true_delta"] == pytest.approx(delta, abs=1e-5)
    assert result.metrics["reward/gradient_intuition.prediction"] == pytest.approx(0.75, abs=1e-4)

    # A wrong inner answer trains on that answer instead; a far-off prediction earns no bonus.
    other = await true_delta(policy, env, task, "blue")
    episode = env.episode(task, policy.ctx)
    await episode.initial_observation()
    result = await episode.step(f"some thoughts first\nPREDICTION: {other - 3.0!r}\nANSWER: blue")
    assert result.reward == pytest.approx(0.25)
    assert result.metrics["gradient_intuition/true_delta"] == pytest.approx(other, abs=1e-5)
    assert abs(other - delta) > 1e-5


async def test_missing_lines(policy):
    env = wrapped()
    (task,) = env.tasks("train")

    async def step(reply: str):
        episode = env.episode(task, policy.ctx)
        await episode.initial_observation()
        return await episode.step(reply)

    no_answer = await step("PREDICTION: 0.1")
    assert no_answer.reward == 0.0 and no_answer.metrics["gradient_intuition/no_answer"] == 1.0
    no_prediction = await step("ANSWER: red")
    assert no_prediction.reward == 1.0  # R_inner only
    assert no_prediction.metrics["gradient_intuition/no_prediction"] == 1.0
    assert "gradient_intuition/true_delta" not in no_prediction.metrics  # nothing was measured


async def test_a_rollout_without_the_policy_checkpoint_fails_clearly(policy):
    env = wrapped()
    (task,) = env.tasks("train")
    episode = env.episode(task, evolve(policy.ctx, policy_checkpoint=None))
    await episode.initial_observation()
    with pytest.raises(MeasurementError, match="policy_checkpoint is not set"):
        await episode.step("PREDICTION: 0.1\nANSWER: red")


async def test_the_prediction_reward_refuses_other_environments():
    with pytest.raises(ValueError, match="gradient_intuition environment only"):
        await prediction_reward("PREDICTION: 0.1", {}, None)


def test_loader_wraps_a_registered_environment_by_name():
    env = intuition_env(inner="ghost_trace", inner_args={"num_examples": 3}, seed=4)
    assert env.needs_policy_checkpoint is True
    assert env.shadow.max_shadows == 2
    assert intuition_env(max_shadows=5).shadow.max_shadows == 5
    tasks = env.tasks("train")
    inner = env.inner.tasks("train")
    assert [t.info["inner_task"] for t in tasks] == list(inner)
    assert [t.answer for t in tasks] == [t.answer for t in inner]
    assert env.rubric.names == ["gradient_intuition.prediction"] and env.rubric.weights == [0.35]
    again = intuition_env(inner="ghost_trace", inner_args={"num_examples": 3}, seed=4)
    assert [t.info["probe"] for t in again.tasks("train")] == [t.info["probe"] for t in tasks]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"inner": "no_such_env"}, r"env.args.inner = 'no_such_env': unknown environment"),
        ({"inner": "gradient_intuition"}, "cannot wrap itself"),
        ({"inner_args": {"bogus": 1}}, "bad \\[env.args\\]"),
        ({"inner_args": [1, 2]}, "env.args.inner_args"),
        ({"alpha": -0.1}, "env.args.alpha = -0.1: must be a finite number >= 0"),
        ({"learning_rate": 0}, "env.args.learning_rate = 0: must be a finite number > 0"),
        ({"seed": "one"}, "env.args.seed"),
        ({"max_shadows": 0}, "env.args.max_shadows = 0: must be an integer >= 1"),
        ({"max_shadows": 1.5}, "env.args.max_shadows = 1.5: must be an integer >= 1"),
    ],
)
def test_bad_arguments_are_named(args, message):
    with pytest.raises(ConfigError, match=message):
        intuition_env(**args)


class TwoTurnEpisode:
    """An inner episode that wants a second turn (or returns a non-number): not wrappable."""

    def __init__(self, result) -> None:
        self.result = result

    def initial_observation(self) -> str:
        return "Say anything."

    def step(self, action: str):
        return self.result


class TwoTurnEnv:
    def __init__(self, result) -> None:
        self.result = result

    def tasks(self, split: str) -> list[Task]:
        return [Task(prompt="Say anything.", id="any")]

    def episode(self, task: Task, ctx) -> TwoTurnEpisode:
        return TwoTurnEpisode(self.result)


async def test_inner_episodes_must_finish_and_score_in_one_step():
    unfinished = GradientIntuitionEnvironment(TwoTurnEnv({"reward": 1.0, "done": False}), ALPHA, LR, seed=0)
    (task,) = unfinished.tasks("train")
    episode = unfinished.episode(task, None)
    assert (await episode.initial_observation())[0]["content"].startswith("Say anything.")
    with pytest.raises(ValueError, match="wraps single-turn environments"):
        await episode.step("PREDICTION: 0\nANSWER: hi")

    not_a_number = GradientIntuitionEnvironment(TwoTurnEnv({"reward": "high"}), ALPHA, LR, seed=0)
    episode = not_a_number.episode(task, None)
    await episode.initial_observation()
    result = await episode.step("PREDICTION: 0\nANSWER: hi")
    assert result.reward is None and result.metrics == {"gradient_intuition/inner_reward_invalid": 1.0}

"""tinker-cookbook 0.6.1's own recipe environments on minds, against the cookbook's own rl loop.

The single-turn math env (``math_rl.arithmetic_env``) and the multi-turn guess-the-number env
(``multiplayer_rl.guess_number``) are loaded as a minds config names them and played by minds'
rollout code; the same groups are played by the cookbook's ``do_group_rollout`` with its
``TinkerTokenCompleter``, on the same local backend, greedily (so both sample the same tokens).
Rewards, metrics and datums must match: minds' datums from ``process_batch`` with the ``direct``
estimator (advantage = reward) against the cookbook's ``trajectory_to_data`` with each trajectory's
total reward as its advantage; the cookbook's centered advantages against minds' ``group_mean``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import tinker
from tinker_cookbook.completers import TinkerTokenCompleter
from tinker_cookbook.rl.data_processing import compute_advantages, trajectory_to_data
from tinker_cookbook.rl.rollouts import do_group_rollout

from minds_core import EpisodeSettings
from minds_core.backends import model_tokenizer
from minds_core.backends.local import DEFAULT_BASE_MODEL, create_service_client
from minds_core.config import EnvConfig, RolloutConfig
from minds_core.contract.plugins import load_plugins
from minds_core.envs.cookbook.models import use_run_model
from minds_core.envs.loading import build_environment
from minds_core.envs.render import Renderer
from minds_core.episodes.groups import Group
from minds_core.episodes.rollout import run_group
from minds_core.rl.advantages import direct, group_mean
from minds_core.rl.data_processing import ProcessingSettings, process_batch

ARITHMETIC = "tinker_cookbook.recipes.math_rl.arithmetic_env:ArithmeticDatasetBuilder"
GUESS_NUMBER = "tinker_cookbook.recipes.multiplayer_rl.guess_number.env:GuessNumberDatasetBuilder"
GROUP = 3


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """The local backend's sampler of the embedded default model, and minds' renderer of it."""
    use_run_model(DEFAULT_BASE_MODEL, lambda: model_tokenizer(DEFAULT_BASE_MODEL))
    service = create_service_client(str(tmp_path_factory.mktemp("checkpoints")))
    sampler = service.create_sampling_client(base_model=DEFAULT_BASE_MODEL).result()
    return sampler, Renderer(sampler.get_tokenizer())


def _datum_fields(datum: tinker.Datum) -> tuple[list[int], list[int], list[float], list[float]]:
    """What both loops put in a datum: input tokens, targets, and the sampler log-probs and advantages where trained."""
    inputs = datum.loss_fn_inputs
    targets = [int(t) for t in inputs["target_tokens"].tolist()]
    logprobs = [round(float(v), 4) for v in inputs["logprobs"].tolist()]
    advantages = [float(v) for v in inputs["advantages"].tolist()]
    return datum.model_input.to_ints(), targets, logprobs, advantages


async def _both(env_id: str, args: dict[str, Any], backend: tuple[Any, Any], max_tokens: int) -> tuple[list[Group], list[Any]]:
    from minds_core import Context

    sampler, renderer = backend
    env = build_environment(EnvConfig(id=env_id, args=args), load_plugins().registry)
    tasks = env.tasks("train")[:2]
    params = tinker.types.SamplingParams(max_tokens=max_tokens, temperature=0.0)
    settings = EpisodeSettings(renderer, params, RolloutConfig(max_total_tokens=4096))
    make_ctx = lambda: Context(sampler=sampler, tokenizer=renderer.tokenizer, service=None, renderer=renderer, base_model=DEFAULT_BASE_MODEL)
    limiter = asyncio.Semaphore(8)
    groups = [await run_group("cookbook", env, task, GROUP, make_ctx, settings, limiter, 0, None) for task in tasks]
    policy = TinkerTokenCompleter(sampler, max_tokens=max_tokens, temperature=0.0)
    theirs = [await do_group_rollout(env.source(task).builder, policy) for task in tasks]
    return groups, theirs


def _compare(groups: list[Group], theirs: list[Any]) -> int:
    """Assert rewards, metrics and datums agree; the number of datums compared."""
    assert all(g.failures == 0 for g in groups), [r.error for g in groups for r in g.rollouts]
    for group, trajectory_group in zip(groups, theirs):
        assert [r.reward for r in group.rollouts] == pytest.approx(trajectory_group.get_total_rewards())
        for rollout, trajectory in zip(group.rollouts, trajectory_group.trajectories_G):
            summed: dict[str, float] = {}
            for transition in trajectory.transitions:
                for key, value in transition.metrics.items():
                    summed[key] = summed.get(key, 0.0) + value
            assert {k: v for k, v in rollout.metrics.items() if k != "reward/group"} == pytest.approx(summed)
        centered = compute_advantages([trajectory_group])[0].tolist()
        assert group_mean([r.reward for r in group.rollouts]) == pytest.approx(centered)
    ours = process_batch(groups, ProcessingSettings(estimator=direct)).datums
    cookbook = [
        datum
        for trajectory_group in theirs
        for trajectory, reward in zip(trajectory_group.trajectories_G, trajectory_group.get_total_rewards())
        if reward != 0
        for datum in trajectory_to_data(trajectory, reward)
    ]
    assert len(ours) == len(cookbook) > 0
    for mine, other in zip(ours, cookbook):
        assert _datum_fields(mine) == _datum_fields(other)
    return len(ours)


def test_the_math_recipe_env_matches_the_cookbooks_loop(backend: tuple[Any, Any]) -> None:
    args = {"batch_size": 2, "n_batches": 2, "group_size": GROUP}
    groups, theirs = asyncio.run(_both(ARITHMETIC, args, backend, max_tokens=6))
    assert _compare(groups, theirs) == 2 * GROUP  # one datum per single-turn rollout
    assert all(g.task.tags == ("problems",) for g in groups)  # ProblemGroupBuilder's logging_tags()


@pytest.mark.slow
def test_the_multi_turn_guess_number_env_matches_the_cookbooks_loop(backend: tuple[Any, Any]) -> None:
    """Ten turns each; the player's turns are shown back as ``player`` messages, so every observation starts a
    new sequence and each turn is a datum of its own, in both loops."""
    args = {"batch_size": 2, "train_group_size": GROUP}
    groups, theirs = asyncio.run(_both(GUESS_NUMBER, args, backend, max_tokens=4))
    turns = [len(t.transitions) for group in theirs for t in group.trajectories_G]
    assert [r.conversation.turns for g in groups for r in g.rollouts] == turns
    assert _compare(groups, theirs) == sum(turns) > len(turns)


@pytest.mark.parametrize(
    ("env_id", "args", "metric"),
    [
        (ARITHMETIC, {"batch_size": 2, "n_batches": 3, "group_size": 4}, "/correct"),
        pytest.param(GUESS_NUMBER, {"batch_size": 2, "train_group_size": 4}, "/num_truncations_max_turn_tokens", marks=pytest.mark.slow),
    ],
    ids=["math", "guess_number"],
)
@pytest.mark.slow
def test_a_cookbook_recipe_trains_through_minds_run(tmp_path: Path, env_id: str, args: dict[str, Any], metric: str) -> None:
    """``minds run`` with the recipe's builder named in [env] id: two steps, no failed rollout, the env's metrics per step."""
    from minds_core.cli.command import main

    sets = [
        f"runs_dir={tmp_path}", "backend=local", f"env.id={env_id}", "trainer.group_size=4", "trainer.groups_per_batch=2",
        "sampling.max_tokens=6", "metrics.sinks=[]", f"env.args={json.dumps(args)}",
    ]  # fmt: skip
    code = main(["run", "--steps", "2", "--name", "recipe", *(a for s in sets for a in ("--set", s))])
    metrics = [json.loads(line) for line in (tmp_path / "recipe" / "metrics.jsonl").read_text().splitlines()]
    assert code in (0, 1) and [m["step"] for m in metrics] == [0, 1]  # 1: the untrained model's rewards may all tie
    assert all(m["rollouts/failed"] == 0 and m["rollouts/total"] == 8 for m in metrics)
    assert any(key.endswith(metric) for key in metrics[0])  # the env's own step metrics, per environment


@pytest.mark.slow
def test_a_resumed_cookbook_run_plays_the_groups_an_unbroken_run_plays(tmp_path: Path) -> None:
    """The math recipe env: 2 steps, then resumed to 3, plays at step 2 the problems a 3-step run plays there."""
    from minds_core.cli.command import main

    sets = [
        f"runs_dir={tmp_path}", "backend=local", f"env.id={ARITHMETIC}", "trainer.group_size=2", "trainer.groups_per_batch=2",
        "sampling.max_tokens=4", "metrics.sinks=[]", "trainer.save_every=1", "seed=5", "rollout.drop_constant_reward_groups=false",
        'env.args={"batch_size": 2, "n_batches": 4, "group_size": 2}',
    ]  # fmt: skip
    options = [a for s in sets for a in ("--set", s)]
    # each exits 0, or 1 when the untrained model's rewards tie in every group (the run says so)
    assert main(["run", "--steps", "2", "--name", "broken", *options]) in (0, 1)
    assert main(["run", "--resume", str(tmp_path / "broken"), "--set", "trainer.steps=3"]) in (0, 1)
    assert main(["run", "--steps", "3", "--name", "unbroken", *options]) in (0, 1)

    def prompts(run: str) -> dict[int, list[Any]]:
        rows = [json.loads(line) for line in (tmp_path / run / "rollouts.jsonl").read_text().splitlines()]
        return {step: [(r["task"], r["prompt"]) for r in rows if r["step"] == step] for step in {r["step"] for r in rows}}

    broken, unbroken = prompts("broken"), prompts("unbroken")
    assert sorted(broken) == sorted(unbroken) == [0, 1, 2] and broken == unbroken and broken[2] != broken[1]
    metrics = [json.loads(line) for line in (tmp_path / "broken" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2] and all(m["rollouts/failed"] == 0 for m in metrics)

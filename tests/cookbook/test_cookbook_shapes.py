"""Every shape of tinker-cookbook object an ``[env] id`` may hand over, and the boundaries minds names.

The objects are tests/cookbook/cookbook_shapes.py's, loaded by path and name (``path:NAME``) as a
config would; episodes play on the local backend's sampler of the embedded default model.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import tinker
from transformers import AutoTokenizer

from minds_core import Context, EpisodeSettings, hookimpl
from minds_core.backends import model_tokenizer
from minds_core.backends.local import DEFAULT_BASE_MODEL, create_service_client
from minds_core.backends.local.model.tiny_model import tiny_model_path
from minds_core.base.errors import ConfigError
from minds_core.config import EnvConfig, RolloutConfig
from minds_core.contract.locate import import_environment
from minds_core.contract.plugins import load_plugins
from minds_core.envs.conflicts import known_conflict
from minds_core.envs.cookbook.environment import CookbookEnvironment
from minds_core.envs.cookbook.episode import observation_tokens
from minds_core.envs.cookbook.models import filled_args, run_model, use_run_model
from minds_core.envs.loading import build_environment
from minds_core.envs.render import Renderer
from minds_core.episodes.rollout import run_group

SHAPES = Path(__file__).resolve().parent / "cookbook_shapes.py"


def _load(name: str, **args: Any) -> Any:
    return build_environment(EnvConfig(id=f"{SHAPES}:{name}", args=args), load_plugins().registry)


@pytest.fixture(autouse=True)
def tiny() -> None:
    use_run_model(DEFAULT_BASE_MODEL, lambda: model_tokenizer(DEFAULT_BASE_MODEL))


@pytest.mark.parametrize(
    ("name", "args", "splits", "tasks", "tags"),
    [
        ("one_env", {}, ["train"], 1, ()),
        ("one_builder", {}, ["train"], 1, ("pairs", "start_40")),
        ("builders", {}, ["train"], 3, ("pairs", "start_50")),
        ("dataset", {"batches": 3}, ["train"], 6, ("pairs", "start_20")),
        ("PairDatasetBuilder", {"batches": 2}, ["train", "test"], 4, ("pairs", "start_20")),
    ],
)
def test_every_shape_loads_as_tasks_per_split(name: str, args: dict, splits: list[str], tasks: int, tags: tuple) -> None:
    env = _load(name, **args)
    assert isinstance(env, CookbookEnvironment) and list(env.splits) == splits
    assert len(env.tasks("train")) == tasks and env.tasks("train")[0].tags == tags
    if "test" not in splits:
        with pytest.raises(KeyError, match="has no 'test' split"):
            env.tasks("test")


def test_a_renderer_the_model_cannot_use_is_refused_at_load() -> None:
    module = import_environment(str(SHAPES))
    filled = filled_args("'x'", module.PairDatasetBuilder, {"batches": 1})
    assert filled == {"batches": 1, "model_name_for_tokenizer": DEFAULT_BASE_MODEL, "renderer_name": "qwen3_instruct"}
    with pytest.raises(ConfigError, match=f"renderer 'deepseekv3' .* cannot render for the model '{DEFAULT_BASE_MODEL}'"):
        filled_args("'x'", module.PairDatasetBuilder, {"batches": 1, "renderer_name": "deepseekv3"})
    with pytest.raises(ConfigError, match="renderer 'no_such' .* cannot render"):
        filled_args("'x'", module.PairDatasetBuilder, {"batches": 1, "renderer_name": "no_such"})


def test_a_model_no_cookbook_renderer_matches_is_refused_by_name() -> None:
    def odd() -> Any:
        tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_path()))
        tokenizer.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
        return tokenizer

    use_run_model("my-org/odd-model", odd)
    module = import_environment(str(SHAPES))
    with pytest.raises(ConfigError, match="no renderer for the model 'my-org/odd-model'.*set env.args.renderer_name"):
        filled_args("'x'", module.PairDatasetBuilder, {"batches": 1})
    assert run_model().name == "my-org/odd-model"


def test_a_builder_calling_the_hosted_service_is_named() -> None:
    with pytest.raises(ConfigError, match="called the Tinker service itself \\(AuthenticationError"):
        _load("hosted_only")


def test_an_image_observation_is_refused_by_name() -> None:
    image = tinker.ModelInput(chunks=[tinker.types.ImageChunk(data=b"x", format="png")])
    with pytest.raises(TypeError, match="the first observation is a ModelInput minds cannot train on as tokens"):
        observation_tokens(image, "the first observation")


@pytest.fixture(scope="module")
def sampler(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return create_service_client(str(tmp_path_factory.mktemp("ckpt"))).create_sampling_client(base_model=DEFAULT_BASE_MODEL).result()


def _play(env: CookbookEnvironment, sampler: Any, group_size: int, **rollout: Any) -> Any:
    renderer = Renderer(sampler.get_tokenizer())
    ctx = lambda: Context(sampler=sampler, tokenizer=renderer.tokenizer, service=None, renderer=renderer, base_model=DEFAULT_BASE_MODEL)
    settings = EpisodeSettings(renderer, tinker.types.SamplingParams(max_tokens=5, temperature=1.0), RolloutConfig(**rollout))
    task = env.tasks("train")[0]
    return asyncio.run(run_group("shapes", env, task, group_size, ctx, settings, asyncio.Semaphore(4), 0, 7))


def test_turns_extend_one_sequence_and_the_group_rewards_and_cleanup_run(sampler: Any) -> None:
    module = import_environment(str(SHAPES))
    env = _load("one_builder")
    group = _play(env, sampler, group_size=3)  # 3 rollouts from a builder of 2 envs: make_envs() twice
    assert group.failures == 0
    sampled = [r.conversation.sampled_tokens for r in group.rollouts]
    for rollout, count in zip(group.rollouts, sampled):
        conv = rollout.conversation
        assert conv.turns == 2 and conv.spans() == [(0, len(conv.tokens))]  # the second observation extends the first
        assert conv.tokens[:3] == [10, 11, 40]
        longest = float(count == max(sampled))
        assert rollout.reward == pytest.approx(count + longest)  # per-step rewards (action lengths) + compute_group_rewards'
        assert rollout.metrics["reward/group"] == longest and rollout.metrics["longest"] == longest
    assert module.CALLS["group_rewards"][-1][1] == 3 and module.CALLS["cleanup"][-1] == 40


def test_a_group_played_elsewhere_scores_from_its_trajectories_and_names_the_envs_it_lacks(sampler: Any) -> None:
    """As on a Ray worker: the conversations come back with their trajectories, the envs stay behind."""
    env = _load("one_builder")
    group = _play(env, sampler, group_size=2)
    task, conversations = group.task, [r.conversation for r in group.rollouts]
    scores = asyncio.run(env.group_rewards(task, conversations))  # its records are gone: as in the driver process
    assert [reward for reward, _ in scores] == [float(c.sampled_tokens == max(x.sampled_tokens for x in conversations)) for c in conversations]
    envs_reader = import_environment(str(SHAPES)).PairBuilder

    async def reads_env(self, trajectory_group, env_group):
        return [(float(e.turns), {}) for e in env_group]

    envs_reader.compute_group_rewards, original = reads_env, envs_reader.compute_group_rewards
    try:
        with pytest.raises(RuntimeError, match=r"PairBuilder.compute_group_rewards read .turns of an Env played in another process"):
            asyncio.run(env.group_rewards(task, conversations))
    finally:
        envs_reader.compute_group_rewards = original


def test_the_token_budget_ends_an_episode_with_the_rewards_it_earned(sampler: Any) -> None:
    group = _play(_load("one_env"), sampler, group_size=2, max_turns=1)
    assert group.failures == 0 and all(r.conversation.turns == 1 and r.conversation.truncated for r in group.rollouts)


class _Plugin:
    @hookimpl
    def minds_register_environments(self, register: Any) -> None:
        module = import_environment(str(SHAPES))
        register("pair_games", lambda batches=2: module.PairDataset(batches), "a cookbook RLDataset")


def test_a_plugin_registers_a_cookbook_dataset_by_name() -> None:
    plugins = load_plugins(extra=[("cookbook_games", _Plugin())])
    env = build_environment(EnvConfig(id="pair_games", args={"batches": 1}), plugins.registry)
    assert isinstance(env, CookbookEnvironment) and len(env.tasks("train")) == 2


def test_the_datasets_pickling_conflict_is_named_with_the_installed_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The libraries' own failure, raised by an environment's load, is a usage error naming the installed versions."""
    import importlib.metadata
    import pickle

    import pyarrow
    from datasets.fingerprint import Hasher

    from minds_core.cli.command import main

    try:
        Hasher.hash(pyarrow.MonthDayNano)
    except pickle.PicklingError:
        pass
    else:
        pytest.skip("the installed datasets, pyarrow and dill pickle MonthDayNano: no conflict to name")
    env = tmp_path / "interval_env.py"
    env.write_text(
        "import pyarrow\nfrom datasets.fingerprint import Hasher\n\n\n"
        "def load_environment():\n    Hasher.hash(pyarrow.MonthDayNano)  # as datasets' fingerprinting hashes what it is given\n"
    )
    code = main(["run", "--env", str(env), "--steps", "1", "--set", f"runs_dir={tmp_path}"])
    error = capsys.readouterr().err
    said = [line for line in error.splitlines() if line.startswith("minds: error:")]
    assert code == 2 and len(said) == 1 and "Traceback" not in error, error[-2000:]
    versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in ("datasets", "pyarrow", "dill"))
    assert "interval_env.py" in said[0] and f"a known conflict of the installed {versions}" in said[0]
    assert known_conflict(ValueError("something else")) is None


@pytest.mark.slow
def test_a_timed_out_rollout_is_retried_with_a_fresh_env(sampler: Any) -> None:
    group = _play(_load("hanging_once"), sampler, group_size=1, timeout=0.5, retries=1)
    (rollout,) = group.rollouts
    assert rollout.ok and rollout.attempts == 2 and rollout.conversation.turns == 2
    assert import_environment(str(SHAPES)).HangingOnceEnv.made == 2


def test_an_initial_observation_overflow_scores_its_reward_without_sampling(sampler: Any) -> None:
    group = _play(_load("overflow_env"), sampler, group_size=2)
    assert group.failures == 0 and [r.reward for r in group.rollouts] == [-1.0, -1.0]
    assert all(r.conversation.tokens == [] and r.conversation.record.stop_reason == "max_tokens" for r in group.rollouts)

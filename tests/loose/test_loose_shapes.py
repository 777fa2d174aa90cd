"""Each loose shape as an Environment: prompts, per-rollout state, rubric and step scoring, build()."""

from __future__ import annotations

import asyncio
import importlib
import random
from pathlib import Path
from types import SimpleNamespace

import attrs
import pytest
import tinker
from structlog.testing import capture_logs

from minds_core.base.errors import ConfigError
from minds_core.config import RolloutConfig
from minds_core.contract.environment import Context
from minds_core.contract.rubric import INVALID_PARTS_METRIC
from minds_core.envs.cookbook.environment import CookbookEnvironment
from minds_core.envs.loose import DRAWS, LooseEnvironment, PolicySampler, adapted, load_loose_environment
from minds_core.envs.render import Renderer
from minds_core.episodes.groups import EpisodeSettings
from minds_core.episodes.rollout import run_rollout


async def test_drawn_prompts_are_shared_by_a_task_and_state_is_per_rollout(loose_dir: Path, ctx: Context) -> None:
    env = load_loose_environment("./environments/word_echo", {"seed": 3, "prefix": "Say:"})
    tasks = env.tasks("train")
    assert len(tasks) == DRAWS and len({t.id for t in tasks}) == DRAWS
    first, again, other = env.episode(tasks[0], ctx), env.episode(tasks[0], ctx), env.episode(tasks[5], ctx)
    observations = [await e.initial_observation() for e in (first, again, other)]

    reference = importlib.import_module("word_echo").load_environment(seed=3, prefix="Say:")
    expected = [reference.initial_observation(), reference.initial_observation()]
    assert observations == [expected[0], expected[0], expected[1]]

    word = observations[0].removeprefix("Say: ")
    result = await first.step(word)
    assert result.reward == 1.0 and result.done
    assert (first.instance.steps, again.instance.steps, env.obj.steps) == (1, 0, 0)
    assert (await again.step("")).reward == 0.0
    assert first.instance is not again.instance


async def test_each_split_draws_from_its_own_copy_of_the_loaded_object(loose_dir: Path, ctx: Context) -> None:
    env = load_loose_environment("./environments/word_echo", {"seed": 3, "prefix": "Say:"})
    reference = importlib.import_module("word_echo").load_environment(seed=3, prefix="Say:")
    stream = [reference.initial_observation() for _ in range(6)]

    async def draw(split: str, count: int) -> list[str]:
        return [await env.episode(task, ctx).initial_observation() for task in env.tasks(split)[:count]]

    assert await draw("eval", 3) == stream[:3]
    assert await draw("train", 6) == stream  # drawing eval first did not shift train
    assert await draw("eval", 6) == stream  # nor did train shift eval
    assert env.obj.rng.getstate() == random.Random(3).getstate()  # the loaded object itself is never drawn from


def reversed_word(completion: str, answer: str) -> float:
    return float(completion.strip() == answer)


class Backwards:
    """Draws a word to spell backwards; with ``keep_answer`` it keeps the expected reply in ``answer``."""

    def __init__(self, keep_answer: bool) -> None:
        self.rng, self.keep_answer = random.Random(0), keep_answer
        self.rubric = SimpleNamespace(funcs=[reversed_word], weights=[1.0])

    def initial_observation(self) -> str:
        word = self.rng.choice(["lantern", "pebble", "violin", "harbor", "meadow"])
        if self.keep_answer:
            self.answer = word[::-1]
        return f"Spell {word} backwards."


async def test_drawn_tasks_take_their_answer_from_the_instance(ctx: Context) -> None:
    env = LooseEnvironment("inline", Backwards(keep_answer=True))
    for task in env.tasks("train")[:4]:
        right, wrong = env.episode(task, ctx), env.episode(task, ctx)
        word = (await right.initial_observation()).split()[1]
        await wrong.initial_observation()
        assert (await right.step(word[::-1])).reward == 1.0
        assert (await wrong.step(word)).reward == 0.0


async def test_tasks_without_answers_score_with_an_empty_answer_and_one_warning(ctx: Context) -> None:
    env = LooseEnvironment("inline", Backwards(keep_answer=False))
    rows = LooseEnvironment("inline", SimpleNamespace(dataset=[{"question": "Hi?"}] * 3, rubric=env.obj.rubric))
    with capture_logs() as logs:
        episode = env.episode(env.tasks("train")[0], ctx)
        await episode.initial_observation()
        drawn = [(await episode.step("")).reward, (await episode.step("nretnal")).reward]
        scored = [(await rows.episode(task, ctx).step(reply)).reward for task, reply in zip(rows.tasks("train"), ["", "x", " "])]
    assert drawn == [1.0, 0.0] and scored == [1.0, 0.0, 1.0]  # reversed_word compares the stripped reply with ""
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [w["env"] for w in warnings] == ["inline", "inline"]  # one per environment, not one per rollout
    assert all('answer=""' in w["event"] for w in warnings)


async def test_async_object_continues_on_its_own_copy(loose_dir: Path, ctx: Context) -> None:
    env = load_loose_environment("seedlike_envs.async_steps", {"low": 10, "high": 20})
    episode = env.episode(env.tasks("train")[0], ctx)
    assert (await episode.initial_observation()).startswith("What is 1")
    first = await episode.step("no idea")
    assert not first.done and first.messages == [{"role": "user", "content": "Are you sure? Answer again."}]
    final = await episode.step(str(episode.instance.total))
    assert final.done and final.reward == 1.0
    assert env.obj.replies == []


async def test_rubric_rows_get_what_they_name(loose_dir: Path, ctx: Context) -> None:
    pytest.importorskip("verifiers", reason="seedlike_envs.rubric_rows is built on verifiers: pip install -c constraints.txt -e plugins/verifiers_bridge")
    env = load_loose_environment("seedlike_envs.rubric_rows", {"max_chars": 10})
    tasks = env.tasks("train")
    assert [t.prompt for t in tasks][:2] == ["What is the capital of France?", "What is the capital of Japan?"]
    assert tasks[0].answer == "Paris" and tasks[0].info == {"max_chars": 10}
    assert len(env.tasks("eval")) == 2
    with pytest.raises(ConfigError, match="no test_dataset for split 'test'"):
        env.tasks("test")

    episode = env.episode(tasks[0], ctx)
    assert await episode.initial_observation() == "What is the capital of France?"
    result = await episode.step("Paris")
    assert result.reward == pytest.approx(1.0 + 0.5 * 1.0 + 0.1 * 1.0)
    assert result.metrics == {"reward/mentions_answer": 1.0, "reward/shares_letters": 1.0, "reward/short_reply": 1.0}
    assert episode.state == {"parsed": "Paris"}
    longer = await env.episode(tasks[1], ctx).step("I think it is Kyoto, maybe")
    assert longer.metrics["reward/short_reply"] == 0.0 and longer.metrics["reward/mentions_answer"] == 0.0


async def test_step_rows_share_one_object(loose_dir: Path, ctx: Context) -> None:
    env = load_loose_environment("seedlike_envs.step_rows", {})
    tasks = env.tasks("train")
    assert tasks[0].prompt[1] == {"role": "user", "content": "Name a color."}
    results = await asyncio.gather(*(env.episode(t, ctx).step("aeiou xyz") for t in tasks))
    assert env.obj.calls == len(tasks)
    assert {r.reward for r in results} == {5 / 8} and all(r.done for r in results)


async def test_build_receives_the_rollouts_sampler_once_per_policy(loose_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("verifiers", reason="seedlike_envs.model_aware is built on verifiers: pip install -c constraints.txt -e plugins/verifiers_bridge")
    from minds_core.backends.local import TINY_MODEL, create_service_client

    module = importlib.import_module("seedlike_envs.model_aware")
    module.BUILT_WITH.clear()
    env = load_loose_environment("seedlike_envs.model_aware", {})
    service = create_service_client(tmp_path)
    try:
        old, new = [await service.create_sampling_client(base_model=TINY_MODEL) for _ in range(2)]

        def context(sampler: object) -> Context:
            return Context(sampler=sampler, tokenizer=None, service=service, renderer=None, base_model=TINY_MODEL)

        task = env.tasks("train")[0]
        rewards = [(await env.episode(task, context(s)).step("1 2")).reward for s in (old, old, new)]
        assert [built.sampler for built in module.BUILT_WITH] == [old, new]
        expected = await module.PolicyScorer(new).answer_logprob("1 2", task.answer)
        assert rewards[2] == pytest.approx(expected) and rewards[0] == pytest.approx(expected)
        assert expected < 0
    finally:
        service.close("success")


async def test_non_numeric_rubric_parts_count_zero_and_warn_once(ctx: Context) -> None:
    def verdict(completion: str) -> str:
        return "n/a"

    def length(completion: str) -> float:
        return float(len(completion))

    obj = SimpleNamespace(dataset=[{"question": "Say hi."}], rubric=SimpleNamespace(funcs=[verdict, length], weights=[1.0, 0.5]))
    env = LooseEnvironment("inline", obj)
    task = env.tasks("train")[0]
    with capture_logs() as logs:
        results = [await env.episode(task, ctx).step("hey") for _ in range(2)]
    assert [r.reward for r in results] == [1.5, 1.5]
    assert results[0].metrics == {"reward/length": 3.0, INVALID_PARTS_METRIC: 1.0}
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["functions"] == ["verdict"]


async def test_non_numeric_step_reward_counts_zero_with_a_warning(tmp_path: Path) -> None:
    from minds_core.backends.local import TINY_MODEL, create_service_client

    env = LooseEnvironment("inline", SimpleNamespace(dataset=[{"question": "Rate this."}], step=lambda action_text: {"reward": "high"}))
    service = create_service_client(tmp_path)
    try:
        sampler = await service.create_sampling_client(base_model=TINY_MODEL)
        renderer = Renderer(sampler.get_tokenizer())
        ctx = Context(sampler=sampler, tokenizer=renderer.tokenizer, service=service, renderer=renderer, base_model=TINY_MODEL)
        settings = EpisodeSettings(renderer, tinker.types.SamplingParams(max_tokens=4), RolloutConfig())
        with capture_logs() as logs:
            rollout = await run_rollout(env, env.tasks("train")[0], ctx, settings, seed=0)
    finally:
        service.close("success")
    assert rollout.ok and rollout.reward == 0.0 and rollout.invalid_reward
    assert any(e["event"] == "non-numeric reward counted as 0" and "high" in e["rewards"] for e in logs)


async def test_an_in_place_build_for_a_newer_policy_leaves_older_scorers_alone() -> None:
    class InPlace:
        dataset = [{"question": "q"}]
        value = 0.0

        def build(self, sampler: object) -> None:
            self.value = sampler.value

        def step(self, text: str) -> dict:
            return {"reward": self.value}

    env = LooseEnvironment("inline", InPlace())
    old, new = PolicySampler(SimpleNamespace(value=1.0)), PolicySampler(SimpleNamespace(value=2.0))
    old_scorer = await env.scorer(None, old)
    new_scorer = await env.scorer(None, new)  # off-policy: a newer policy's rollout scores meanwhile
    assert (await env.step_shared(old_scorer, "x"))["reward"] == 1.0
    assert (await env.step_shared(new_scorer, "x"))["reward"] == 2.0
    assert await env.scorer(None, PolicySampler(old.sampler)) is old_scorer and env.obj.value == 0.0


async def test_reward_functions_get_the_policy_and_tokenizer_in_info_and_odd_parameters() -> None:
    tokenizer = SimpleNamespace(encode=lambda text: text.split())
    sampler = SimpleNamespace(get_tokenizer=lambda: tokenizer, name="policy-3")

    def policy_words(completion, info, _, /):
        client = info["tinker_client"]
        return float(len(client.tokenizer.encode(completion)) + (client.name == "policy-3") + (info["tokenizer"] is tokenizer))

    def everything(**_):
        return float(sorted(_) == sorted(["completion", "prompt", "task", "answer", "info", "state", "ctx", "messages", "parser"]))

    rubric = SimpleNamespace(funcs=[policy_words, everything], weights=[1.0, 10.0], class_objects={"parser": object()})
    env = LooseEnvironment("inline", SimpleNamespace(dataset=[{"question": "Hi?", "answer": "a b"}], rubric=rubric))
    ctx = Context(sampler=sampler, tokenizer=tokenizer, service=None, renderer=None, base_model="none")
    result = await env.episode(env.tasks("train")[0], ctx).step("one two three")
    assert result.metrics == {"reward/policy_words": 5.0, "reward/everything": 1.0}
    assert result.reward == 15.0


class Counter:
    """One task: say a number; the reward is 1 for a reply that contains it."""

    def __init__(self, number: int, sampler: object) -> None:
        self.number, self.sampler = number, sampler

    def initial_observation(self) -> str:
        return f"Say {self.number}."

    def step(self, text: str) -> dict:
        return {"reward": float(str(self.number) in text), "metrics": {"label": "counter", "policy": self.sampler.value}}


async def test_an_async_builder_lists_its_tasks_at_load_and_rebuilds_per_policy(ctx: Context) -> None:
    class AsyncBuilder:
        async def build(self, sampling_client: object) -> tuple:
            return tuple(Counter(n, sampling_client) for n in (3, 5))

    env = LooseEnvironment("inline", AsyncBuilder())
    tasks = env.tasks("train")
    assert [t.id for t in tasks] == ["train-0", "train-1"]
    for value in (1.0, 2.0):
        episode = env.episode(tasks[1], attrs.evolve(ctx, sampler=SimpleNamespace(value=value)))
        assert await episode.initial_observation() == "Say 5."
        result = await episode.step("5!")
        assert (result.reward, result.metrics) == (1.0, {"policy": value})  # the label is dropped, the policy's own sampler used


def test_a_builder_that_uses_the_sampler_while_listing_is_refused() -> None:
    class Eager:
        def build(self, sampling_client: object) -> list:
            sampling_client.get_tokenizer()
            return []

    with pytest.raises(ConfigError, match=r"called at load to list its tasks, failed.*used the sampler \(get_tokenizer\)"):
        LooseEnvironment("inline", Eager())


@pytest.mark.parametrize("style", ["cookbook", "mapping"])
async def test_cookbook_and_observation_spellings_continue_the_episode(loose_dir: Path, ctx: Context, style: str) -> None:
    env = load_loose_environment("seedlike_envs.cookbook_turns", {"style": style})
    episode = env.episode(env.tasks("train")[0], ctx)
    assert await episode.initial_observation() == "Guess my vowel."
    first = await episode.step("b")
    assert not first.done and first.messages == [{"role": "user", "content": "Wrong. Try again."}]
    final = await episode.step(episode.instance.secret)
    assert final.done and final.reward == 1.0


async def test_an_unknown_step_key_is_refused_by_name(loose_dir: Path, ctx: Context) -> None:
    env = load_loose_environment("seedlike_envs.cookbook_turns", {"style": "typo"})
    episode = env.episode(env.tasks("train")[0], ctx)
    await episode.initial_observation()
    with pytest.raises(TypeError, match=r"unknown key\(s\) 'obsevation'.*done or episode_done"):
        await episode.step("b")


async def test_a_none_step_reward_is_an_invalid_reward_as_documented(tmp_path: Path) -> None:
    from minds_core.backends.local import TINY_MODEL, create_service_client

    env = LooseEnvironment("inline", SimpleNamespace(dataset=[{"question": "Rate this."}], step=lambda action_text: {"reward": None}))
    service = create_service_client(tmp_path)
    try:
        sampler = await service.create_sampling_client(base_model=TINY_MODEL)
        renderer = Renderer(sampler.get_tokenizer())
        ctx = Context(sampler=sampler, tokenizer=renderer.tokenizer, service=service, renderer=renderer, base_model=TINY_MODEL)
        task = env.tasks("train")[0]
        params = tinker.types.SamplingParams(max_tokens=4)
        zero = await run_rollout(env, task, ctx, EpisodeSettings(renderer, params, RolloutConfig()), seed=0)
        fail = await run_rollout(env, task, ctx, EpisodeSettings(renderer, params, RolloutConfig(invalid_reward="fail")), seed=0)
    finally:
        service.close("success")
    assert zero.ok and zero.reward == 0.0 and zero.invalid_reward
    assert not fail.ok and fail.invalid_reward and "invalid reward [None]" in fail.error


class _CookbookStyleEnv:
    """A tinker-cookbook-style Env: (ModelInput, stop condition) observations, token actions."""

    def __init__(self, number: int) -> None:
        self.number = number

    async def initial_observation(self) -> tuple:
        return tinker.types.ModelInput.from_ints([1, 2, self.number]), [0]

    async def step(self, action: list[int]) -> dict:
        return {"reward": 1.0}


async def test_a_duck_typed_cookbook_env_is_refused_and_a_real_one_goes_to_the_cookbook_adapter(ctx: Context) -> None:
    class Builder:
        def build(self, sampling_client: object) -> list:
            return [_CookbookStyleEnv(n) for n in (3, 5)]

    env = LooseEnvironment("inline", Builder())  # duck-typed: known when its first observation is a tuple
    episode = env.episode(env.tasks("train")[0], ctx)
    with pytest.raises(ConfigError, match=r"returned a tuple, as a tinker-cookbook Env does, but _CookbookStyleEnv does not subclass"):
        await episode.initial_observation()

    Env = type("Env", (), {"__module__": "tinker_cookbook.rl.types"})  # the cookbook's own base class: known at load
    ProblemEnv = type("ProblemEnv", (Env, _CookbookStyleEnv), {})

    class CookbookBuilder:
        def build(self, sampling_client: object) -> list:
            return [ProblemEnv(3), ProblemEnv(4)]

    env = adapted("inline", CookbookBuilder())
    assert isinstance(env, CookbookEnvironment) and [t.id for t in env.tasks("train")] == ["train-0", "train-1"]

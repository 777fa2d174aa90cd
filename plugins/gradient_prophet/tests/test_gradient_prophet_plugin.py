"""The installed distribution: what it registers, its lesson data, its tasks and its argument errors."""

import subprocess
import sys

import pytest

from minds_core.base.errors import ConfigError
from minds_core.contract.plugins import load_plugins
from minds_gradient_prophet.lessons import LESSON_SETS
from minds_gradient_prophet.prophet import IN_CONTEXT, SURPRISE, in_context_prompt, load_gradient_prophet
from minds_gradient_prophet.trivia import TRIVIA


def test_the_plugin_registers_its_environments_and_reward_functions():
    plugins = load_plugins()
    (info,) = [p for p in plugins.plugins if p.name == "gradient_prophet"]
    assert info.ok and info.distribution == "minds-plugin-gradient-prophet"
    assert info.registered["environments"] == ["gradient_prophet", "gradient_intuition", "entropy_intuition"]
    assert sorted(info.registered["reward_functions"]) == [
        "entropy_intuition.entropy",
        "gradient_intuition.prediction",
        "gradient_prophet.in_context",
        "gradient_prophet.surprise",
    ]
    assert plugins.registry.get("environments", "gradient_prophet").obj is load_gradient_prophet


@pytest.mark.slow
def test_loading_the_plugin_does_not_import_torch():
    code = (
        "import sys\n"
        "from minds_core.contract.plugins import load_plugins\n"
        "assert 'gradient_prophet' in load_plugins().registry.names('environments')\n"
        "print(sorted(m for m in ('torch', 'tinker', 'transformers') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_lesson_sets_and_trivia_are_well_formed():
    assert len(LESSON_SETS) >= 30
    assert len({s.id for s in LESSON_SETS}) == len(LESSON_SETS)
    for lessons in LESSON_SETS:
        assert len(lessons.probes) >= 4, lessons.id
        pairs = [lessons.lesson, *lessons.probes]
        texts = [text for qa in pairs for text in (qa.question, qa.answer)]
        assert all(t.strip() == t and t for t in texts), lessons.id
    assert len(set(TRIVIA)) == len(TRIVIA) >= 20


def test_every_set_gives_one_task_per_kind_and_lands_in_one_split():
    env = load_gradient_prophet(eval_sets=5, seed=1)
    train, held_out = env.tasks("train"), env.tasks("eval")
    assert len(held_out) == 2 * 5 and len(train) == 2 * (len(LESSON_SETS) - 5)
    train_ids = {t.info["set_id"] for t in train}
    assert train_ids.isdisjoint(t.info["set_id"] for t in held_out)
    assert {t.info["kind"] for t in train} == {IN_CONTEXT, SURPRISE}
    task = next(t for t in train if t.info["kind"] == IN_CONTEXT)
    lessons = next(s for s in LESSON_SETS if s.id == task.info["set_id"])
    assert task.prompt == in_context_prompt(lessons)
    assert all(p.question in task.prompt for p in lessons.probes)
    assert [t.id for t in load_gradient_prophet(eval_sets=5, seed=1).tasks("train")] == [t.id for t in train]
    only = load_gradient_prophet(kinds=["surprise"]).tasks("train")
    assert {t.info["kind"] for t in only} == {SURPRISE}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"kinds": ["guess"]}, r"env.args.kinds = \['guess'\]: must be a non-empty list"),
        ({"kinds": []}, "env.args.kinds"),
        ({"eval_sets": len(LESSON_SETS)}, "env.args.eval_sets"),
        ({"eval_sets": 1.5}, "env.args.eval_sets"),
        ({"topk": 1}, "env.args.topk = 1: must be an integer >= 2"),
    ],
)
def test_bad_arguments_are_named(args, message):
    with pytest.raises(ConfigError, match=message):
        load_gradient_prophet(**args)

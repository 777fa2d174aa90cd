"""``minds new-plugin NAME``: a plugin distribution that installs, registers an environment and passes its tests."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from minds_core.base.errors import UsageError
from minds_core.base.installing import pip_install
from minds_core.contract.parts import NAME_RULE

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "minds-plugin-{dist}"
version = "0.1.0"
description = "The {name} environment for minds"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["minds-core"]

[project.entry-points.minds]
{name} = "minds_{name}"

[tool.setuptools.packages.find]
include = ["minds_{name}*"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

INIT = '''\
"""minds-plugin-{dist}: registers the ``{name}`` environment and its reward function."""

from minds_core import hookimpl

from minds_{name}.environment import REWARD_NAME, load_environment
from minds_{name}.rewards import sum_score


@hookimpl
def minds_register_environments(register):
    register("{name}", load_environment, "say the sum of two small numbers")


@hookimpl
def minds_register_reward_functions(register):
    register(REWARD_NAME, sum_score, "1 when the reply is the sum, else up to 0.5 for a reply of digits")
'''

ENVIRONMENT = '''\
"""The {name} environment: what is A + B? One reply per task, scored by sum_score."""

import random
from typing import Any

import attrs

from minds_core import Rubric, SingleTurnEnvironment, Task, arg, env_args, within

from minds_{name}.rewards import sum_score

REWARD_NAME = "{name}.sum_score"


@attrs.frozen
class Args:
    """The environment's [env.args]: each field's type, default, rule and meaning."""

    num_tasks: int = arg(64, within(1, 10_000), doc="tasks per split")
    seed: int = arg(0, doc="seed of the numbers drawn")


def make_tasks(count: int, rng: random.Random, split: str) -> list[Task]:
    """``count`` sums of two numbers below 10."""
    tasks = []
    for i in range(count):
        a, b = rng.randrange(10), rng.randrange(10)
        prompt = f"What is {{a}} + {{b}}? Reply with the number only."
        tasks.append(Task(prompt=prompt, answer=str(a + b), id=f"{{split}}/{{i}}"))
    return tasks


def load_environment(**args: Any) -> SingleTurnEnvironment:
    """The environment from its [env.args] (see Args); a wrong argument is a config error naming it."""
    chosen = env_args(Args, args, env="{name}")
    rng = random.Random(chosen.seed)
    tasks = {{split: make_tasks(chosen.num_tasks, rng, split) for split in ("train", "test")}}
    return SingleTurnEnvironment(tasks, Rubric([sum_score], [1.0], [REWARD_NAME]))
'''

REWARDS = '''\
"""Reward functions: they receive, by parameter name, what they ask for (completion, answer, task, ...)."""


def sum_score(completion: str, answer: str) -> float:
    """1.0 when the reply, stripped, is the answer; else half the share of its characters that are digits.

    The partial credit is a reward a model that cannot add yet can climb (``minds-tiny``, a random
    byte-level model, learns to reply in digits); only the right sum earns full marks.
    """
    reply = completion.strip()
    if reply == answer:
        return 1.0
    return 0.5 * sum(c.isdigit() for c in reply) / len(reply) if reply else 0.0
'''

TEST = '''\
"""The {name} plugin: its tasks and reward, its argument checks, and a short training run."""

import pytest

from minds_core import ConfigError, hookimpl

from minds_{name}.environment import load_environment
from minds_{name}.rewards import sum_score


def test_tasks_have_answers_the_reward_accepts():
    env = load_environment(num_tasks=3, seed=1)
    tasks = env.tasks("train")
    assert len(tasks) == 3 and len(env.tasks("test")) == 3
    assert all(sum_score(f" {{task.answer}} ", task.answer) == 1.0 for task in tasks)
    assert sum_score("twelve", "12") == 0.0
    assert sum_score("13", "12") == 0.5 and sum_score("1x", "12") == 0.25


def test_a_wrong_argument_names_the_key():
    with pytest.raises(ConfigError, match=r"env.args.num_tasks = 0: must be an integer in \\[1, 10000\\]"):
        load_environment(num_tasks=0)


def test_trains_a_few_steps(minds_env_run):
    run = minds_env_run("{name}", args={{"num_tasks": 4}}, steps=2)
    run.assert_trained_unless_said_why()
    assert run.steps == [0, 1]
    rewards = [rollout["reward"] for group in run.rollouts for rollout in group["rollouts"]]
    assert rewards and all(0.0 <= r <= 1.0 for r in rewards)


class ShortReplies:
    """A plugin made for one test: a reward function rewarding short replies."""

    @hookimpl
    def minds_register_reward_functions(self, register):
        register("short.reply", lambda completion: float(len(completion) <= 3), "1 for a reply of 3 characters or less")


def test_a_reward_from_another_plugin_can_score_the_environment(minds_env_run, minds_plugin):
    minds_plugin(ShortReplies(), name="short")
    run = minds_env_run("{name}", args={{"num_tasks": 4}}, steps=1, overrides=["env.rewards=[{{name: short.reply}}]"])
    run.assert_trained_unless_said_why()
    rollouts = [rollout for group in run.rollouts for rollout in group["rollouts"]]
    assert rollouts and all(r["reward"] == float(len(r["completion"][-1]) <= 3) for r in rollouts)
'''

README = """\
# minds-plugin-{dist}

The `{name}` environment for minds: what is A + B? One reply per task, scored
by the `{name}.sum_score` reward function: 1 for the sum, else up to 0.5 for a
reply made of digits (a partial credit that even a model that cannot add yet can
climb).

Install it (which registers it with minds), list it, train on it and run its tests
(the tests use the minds_core.testing fixtures):

```bash
{commands}
```

## Arguments (`[env.args]`)

| key | default | meaning |
|---|---|---|
| `num_tasks` | 64 | tasks per split (1..10000) |
| `seed` | 0 | seed of the numbers drawn |
"""


def next_commands(name: str, folder: Path) -> list[str]:
    """What to run once the plugin is written, runnable from any folder: install, list, train, test."""
    folder = folder.resolve()
    minds = str(Path(sys.executable).with_name("minds"))
    return [
        pip_install(folder),
        shlex.join([minds, "plugins"]),
        shlex.join([minds, "run", "--env", name, "--steps", "2", "--backend", "local"]),
        shlex.join([sys.executable, "-m", "pytest", str(folder)]),
    ]


def plugin_files(name: str, folder: Path) -> dict[str, str]:
    """The files of the plugin distribution ``minds-plugin-NAME`` to be written to ``folder``, by relative path."""
    fields = {"name": name, "dist": name.replace("_", "-"), "commands": "\n".join(next_commands(name, folder))}
    package = f"minds_{name}"
    return {
        "pyproject.toml": PYPROJECT.format(**fields),
        "README.md": README.format(**fields),
        f"{package}/__init__.py": INIT.format(**fields),
        f"{package}/environment.py": ENVIRONMENT.format(**fields),
        f"{package}/rewards.py": REWARDS,
        f"tests/test_{name}.py": TEST.format(**fields),
    }


def write_plugin(name: str, parent: Path = Path(".")) -> Path:
    """Write the plugin ``name`` into the new folder ``PARENT/NAME`` and return that folder."""
    if not NAME_RULE.fullmatch(name):  # it names the environment and the package minds_NAME
        raise UsageError(f"plugin name {name!r}: use lower-case words of letters and digits joined by _, starting with a letter")
    folder = Path(parent) / name
    if folder.exists():
        raise UsageError(f"{folder} already exists; choose another name or --dir")
    for relative, text in plugin_files(name, folder).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder

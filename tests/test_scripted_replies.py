"""ScriptedReplies: a test-only scripted policy that scores script(task, reply) in place of the sampled reply."""

from __future__ import annotations

import asyncio

from minds_core import Rubric, SingleTurnEnvironment, Task
from minds_core.testing import ScriptedReplies, scripted_pick

TASKS = {"train": [Task(prompt="Name a colour.", answer="red", id="colour")]}


def _length(completion: str) -> float:
    return float(len(completion))


def _env() -> SingleTurnEnvironment:
    return SingleTurnEnvironment(TASKS, Rubric([_length], [1.0], ["test.length"]), system_prompt="Be brief.")


def test_the_scripted_reply_is_scored_and_the_rest_is_the_environments() -> None:
    env = _env()
    scripted = ScriptedReplies(env, lambda task, reply: f"{task.answer}!" if reply == "x" else reply * 2)
    (task,) = scripted.tasks("train")
    assert scripted.rubric is env.rubric and scripted.system_prompt == "Be brief."
    episode = scripted.episode(task, None)
    assert episode.initial_observation() == env.episode(task, None).initial_observation()
    assert asyncio.run(episode.step("x")).reward == 4.0  # "red!"
    assert asyncio.run(scripted.episode(task, None).step("abc")).reward == 6.0  # "abcabc"


def test_scripted_pick_is_stable_and_spreads_replies() -> None:
    options = ["a", "b", "c", "d"]
    replies = [f"reply {i}" for i in range(40)]
    picks = [scripted_pick(r, options) for r in replies]
    assert picks == [scripted_pick(r, options) for r in replies]  # the same reply, the same pick
    assert set(picks) == set(options)
    assert scripted_pick("\udcff\x00 bytes", options) in options  # any decoded text, lone surrogates included

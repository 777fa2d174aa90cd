"""Toy environments for the core's tests (fixture plugin): a learnable character task and misbehaving ones."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import socket
import threading
import time
from urllib.parse import urlparse

from minds_core import Rubric, SingleTurnEnvironment, StepResult, Task, hookimpl, span

TARGET = "a"


def share_of_target(completion: str) -> float:
    """Fraction of the reply's characters that are the target character."""
    return completion.count(TARGET) / len(completion) if completion else 0.0


def load_char_share(num_tasks: int = 4) -> SingleTurnEnvironment:
    tasks = [Task(prompt=f"Write the letter {TARGET} many times. ({i})", id=f"t{i}") for i in range(num_tasks)]
    return SingleTurnEnvironment({"train": tasks}, Rubric([share_of_target], names=["toy.share"]))


def starts_with_target(completion: str) -> float:
    """1 when the reply starts with the target character, else 0 (a binary reward)."""
    return float(completion.startswith(TARGET))


#: What toy_secret's tasks answer; nothing in their prompts tells it.
SECRET = "qzxv"


def secret_in_place(completion: str, answer: str) -> float:
    """The share of the answer's characters the reply repeats at the same places from its start (0 to 1)."""
    return sum(a == b for a, b in zip(completion, answer)) / len(answer)


def load_secret(num_tasks: int = 4) -> SingleTurnEnvironment:
    tasks = [Task(prompt=f"Say the secret word. ({i})", answer=SECRET, id=f"s{i}") for i in range(num_tasks)]
    return SingleTurnEnvironment({"train": tasks}, Rubric([secret_in_place], names=["toy.secret"]))


def load_first_char(num_tasks: int = 4) -> SingleTurnEnvironment:
    """Train and test splits of distinct prompts, scored 0 or 1."""
    splits = {
        split: [Task(prompt=f"Begin your reply with {TARGET}. ({split} {i})", id=f"{split}{i}") for i in range(num_tasks)]
        for split in ("train", "test")
    }
    return SingleTurnEnvironment(splits, Rubric([starts_with_target], names=["toy.first"]))


def load_traced() -> SingleTurnEnvironment:
    """Two tasks; the reward (distinct characters) traces a span of its own (``toy.lookup``), and a second reward
    raises on task ``fails``."""

    def traced_variety(completion: str) -> float:
        with span("toy.lookup", table="letters"):
            return float(len(set(completion)))

    def fails_on_task(completion: str, task: Task) -> float:
        if task.id == "fails":
            raise ValueError("reward exploded")
        return 0.0

    tasks = [Task(prompt=f"Write the letter {TARGET}. ({name})", id=name) for name in ("t0", "fails")]
    return SingleTurnEnvironment({"train": tasks}, Rubric([traced_variety, fails_on_task], names=["toy.traced", "toy.fails"]))


def load_blocking(seconds: float = 2.0) -> SingleTurnEnvironment:
    """Three tasks; the reward of task ``blocks`` is sync code that blocks the event loop for ``seconds``."""

    def blocking_share(completion: str, task: Task) -> float:
        if task.id == "blocks":
            time.sleep(seconds)  # sync code holding the event loop, as a slow verifier would
        return share_of_target(completion)

    tasks = [Task(prompt=f"Write the letter {TARGET}. ({name})", id=name) for name in ("t0", "blocks", "t2")]
    return SingleTurnEnvironment({"train": tasks}, Rubric([blocking_share], names=["toy.blocking_share"]))


class FlakyEpisode:
    """Misbehaves according to its task: raise, hang, NaN, a string reward, or fine."""

    def __init__(self, task: Task) -> None:
        self.mode = task.info["mode"]

    def initial_observation(self) -> str:
        return "say anything"

    async def step(self, action: str) -> StepResult | dict:
        if self.mode == "raise":
            raise RuntimeError("environment exploded")
        if self.mode == "hang":
            await asyncio.sleep(3600)
        if self.mode == "nan":
            return StepResult(reward=math.nan)
        if self.mode == "text":
            return {"reward": "excellent"}
        return StepResult(reward=float(len(action) % 3))


class FlakyEnvironment:
    def __init__(self, modes: list[str]) -> None:
        self._tasks = [Task(prompt="", info={"mode": m}, id=m) for m in modes]

    def tasks(self, split: str) -> list[Task]:
        return self._tasks

    def episode(self, task: Task, ctx) -> FlakyEpisode:
        return FlakyEpisode(task)


class EchoToolEpisode:
    """Two turns: the environment answers the first reply with a tool message, then scores."""

    def __init__(self) -> None:
        self.turn = 0

    def initial_observation(self) -> list[dict]:
        return [{"role": "system", "content": "tools: lookup"}, {"role": "user", "content": "find x"}]

    def step(self, action: str) -> StepResult:
        self.turn += 1
        if self.turn == 1:
            return StepResult(reward=None, done=False, messages=[{"role": "tool", "content": "x = 42"}])
        return StepResult(reward=float("42" in action), done=True, metrics={"turns": 2.0})


class TwoTurnEnvironment:
    def tasks(self, split: str) -> list[Task]:
        return [Task(prompt="", id="two-turn", privileged_context="The lookup will say x = 42; reply 42.")]

    def episode(self, task: Task, ctx) -> EchoToolEpisode:
        return EchoToolEpisode()


def kill_server() -> None:
    """SIGKILL the ``minds serve`` named by $TOY_SERVER_PID, then wait until $TOY_SERVER_URL refuses connections."""
    os.kill(int(os.environ["TOY_SERVER_PID"]), signal.SIGKILL)
    url = urlparse(os.environ["TOY_SERVER_URL"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((url.hostname, url.port), timeout=0.5).close()
        except OSError:
            return
        time.sleep(0.05)


#: Episodes started in this process, so that the server dies in the second step (2 rollouts a step).
_episodes = []


class ServerDiesEpisode:
    """Kills the server of the run in step 1: between the two turns of its episodes, before the second samples
    ("sample"); 50 ms after the first turn, while whatever comes next is in flight ("in-flight"); or once its
    rollouts are scored, before the step's training requests ("request")."""

    def __init__(self, phase: str, number: int) -> None:
        self.phase, self.number, self.turn = phase, number, 0

    def initial_observation(self) -> str:
        return "say anything"

    def step(self, action: str) -> StepResult:
        self.turn += 1
        if self.phase == "in-flight" and self.number == 2 and self.turn == 1:
            threading.Timer(0.05, kill_server).start()
        if (self.phase == "sample" and self.number == 2 and self.turn == 1) or (self.phase == "request" and self.number == 3):
            kill_server()
        if self.phase in ("sample", "in-flight") and self.turn == 1:
            return StepResult(reward=None, done=False, messages=[{"role": "user", "content": "again"}])
        return StepResult(reward=float(len(action) % 3), done=True)


class ServerDiesEnvironment:
    def __init__(self, phase: str) -> None:
        self.phase = phase

    def tasks(self, split: str) -> list[Task]:
        return [Task(prompt="", id="dies")]

    def episode(self, task: Task, ctx) -> ServerDiesEpisode:
        _episodes.append(task)
        return ServerDiesEpisode(self.phase, len(_episodes) - 1)


@hookimpl
def minds_register_environments(register):
    register("toy_char_share", load_char_share, "reward = share of the letter a")
    register("toy_secret", load_secret, "reward = the share of the secret answer the reply repeats in place")
    register("toy_first_char", load_first_char, "binary reward: the reply starts with the letter a; train and test splits")
    register("toy_flaky", lambda modes=("ok",): FlakyEnvironment(list(modes)), "episodes that misbehave on purpose")
    register("toy_two_turn", TwoTurnEnvironment, "a two-turn episode with a tool reply")
    register("toy_traced", load_traced, "a reward with a span of its own, and one that raises on task 'fails'")
    register("toy_blocking", load_blocking, "the reward of one of three tasks blocks the event loop (sync sleep)")
    register("toy_server_dies", ServerDiesEnvironment, "kills $TOY_SERVER_PID in step 1: phase sample or request")


class ExplodingSink:
    """A metric sink that fails on its second record."""

    def __init__(self) -> None:
        self.records = 0

    def write(self, record: dict) -> None:
        self.records += 1
        if self.records == 2:
            raise OSError("disk on fire")

    def close(self, summary: dict) -> None:
        """Nothing to release."""


class ServerKillingSink:
    """A metric sink that kills the run's server ($TOY_SERVER_PID) once step 0 is logged: between two steps."""

    def write(self, record: dict) -> None:
        if record["step"] == 0:
            kill_server()

    def close(self, summary: dict) -> None:
        """Nothing to release."""


@hookimpl
def minds_register_metric_sinks(register):
    register("toy_exploding", lambda config, run_dir: ExplodingSink(), "fails on its second record")
    register("toy_kill_server", lambda config, run_dir: ServerKillingSink(), "kills $TOY_SERVER_PID after step 0")


@hookimpl
def minds_register_reward_functions(register):
    register("toy.share", share_of_target, "share of the letter a")
    register("toy.length", lambda completion: float(len(completion)), "characters in the reply")

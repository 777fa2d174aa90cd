"""A hostile environment (fixture plugin): each ``escape`` tries one way for plugin code to end, hang, block, move or flood a run.

``escape`` picks what the episode's ``step`` (or the environment's ``close``, or the
observation) does; ``secret`` is a value its error echoes; ``elsewhere`` is where
``chdir`` moves the process; other arguments (an endpoint, ...) are taken and unused.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import threading
import time

from minds_core import StepResult, Task, hookimpl


class HostileEpisode:
    """Asks for a word; ``step`` escapes as told, else pays a random reward (rollouts of a task differ: the run trains)."""

    def __init__(self, escape: str, secret: str, elsewhere: str) -> None:
        self.escape, self.secret, self.elsewhere = escape, secret, elsewhere

    def initial_observation(self) -> str:
        if self.escape == "huge_observation":
            return "word " * 4_000_000  # 20 MB: far past any token budget
        return "Say a word."

    def step(self, action: str) -> StepResult:
        escape = self.escape
        if escape == "system_exit":
            sys.exit(0)
        if escape == "keyboard_interrupt":
            raise KeyboardInterrupt
        if escape == "generator_exit":
            raise GeneratorExit
        if escape == "cancelled":
            raise asyncio.CancelledError
        if escape == "echo_secret":  # the secret it was given, and one of the environment, printed and raised
            token = os.environ.get("HOSTILE_JUDGE_TOKEN", "")
            print(f"judge key {self.secret}, token {token}")
            print(f"judge key {self.secret}, token {token}", file=sys.stderr)
            raise RuntimeError(f"the judge refused the key {self.secret} (token {token})")
        if escape == "huge_error":
            raise ValueError("x" * 20_000_000)
        if escape == "chdir":
            os.chdir(self.elsewhere)
        if escape == "thread":  # not a daemon, although started from whatever thread minds calls step() in
            threading.Thread(target=threading.Event().wait, name="hostile-forever", daemon=False).start()
        if escape == "block":  # blocks: no await, no timeout of its own (a judge asked without one)
            time.sleep(3600)
        if escape == "async_block":  # an async step that blocks between its awaits, as sync code would
            return self._blocks_inside_async_def()
        if escape == "alarm":  # a timeout on SIGALRM, as math_verify's parse/verify set one: the main thread only
            previous = signal.signal(signal.SIGALRM, signal.default_int_handler)
            signal.setitimer(signal.ITIMER_REAL, 30)
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        if escape == "huge_reply":  # a first turn scored, then a 20 MB reply that no budget holds
            return StepResult(reward=random.random(), done=False, messages=[{"role": "user", "content": "word " * 4_000_000}])
        if escape == "huge_reward":
            return StepResult(reward=1e308)
        return StepResult(reward=random.random())

    async def _blocks_inside_async_def(self) -> StepResult:
        await asyncio.sleep(0)
        time.sleep(3600)
        return StepResult(reward=random.random())

    def close(self) -> object:
        if self.escape == "sync_close_block":  # a sync teardown that blocks (a container stopped without a timeout)
            time.sleep(3600)
        return self._close()

    async def _close(self) -> None:
        if self.escape == "close_block":  # a teardown that never returns (a sandbox asked to stop, without a timeout)
            await asyncio.sleep(3600)


class HostileEnvironment:
    """Two tasks whose episodes escape as ``escape`` says; ``close_exit`` makes ``close()`` call sys.exit(4), ``close_block``
    makes it (and every episode's) await for an hour; ``episode_block`` makes ``episode()`` block for an hour."""

    def __init__(self, escape: str, secret: str, elsewhere: str) -> None:
        self.escape, self.secret, self.elsewhere = escape, secret, elsewhere

    def tasks(self, split: str) -> list[Task]:
        return [Task(prompt="", id=f"t{i}") for i in range(2)]

    def episode(self, task: Task, ctx) -> HostileEpisode:
        if self.escape == "episode_block":  # a new episode set up synchronously (a sandbox started without a timeout)
            time.sleep(3600)
        return HostileEpisode(self.escape, self.secret, self.elsewhere)

    async def close(self) -> None:
        if self.escape == "close_exit":
            sys.exit(4)
        if self.escape == "close_block":
            await asyncio.sleep(3600)


def load_hostile(escape: str = "none", secret: str = "", elsewhere: str = "/", **unused) -> HostileEnvironment:
    """The environment; ``load_exit`` makes loading it call sys.exit(0)."""
    if escape == "load_exit":
        sys.exit(0)
    return HostileEnvironment(escape, secret, elsewhere)


@hookimpl
def minds_register_environments(register):
    register("hostile", load_hostile, "episodes that try to end, hang, move or flood the run (escape=...)")

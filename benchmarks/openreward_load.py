"""Load on the openreward bridge: hundreds of concurrent episodes against a local ORS server.

Run: ``python benchmarks/openreward_load.py [--episodes 400] [--concurrency 200]``
(``--smoke``: 8 episodes, 4 at once, in seconds: checks the script runs).

Both phases run against a real ``openreward.environments.Server`` on 127.0.0.1
serving ``Relay`` (call ``hop``, then answer in plain text; both tools sleep
``--tool-latency`` seconds):

1. solo, then bridge: episodes driven with fixed actions (one tool call, then
   the answer), one at a time (the cost of one episode on an idle server), then
   at most ``--concurrency`` at once. No model: the bridge's own cost.
2. rollouts: the same number of episodes as minds rollouts (``run_group`` on the
   local backend's tiny model), ``--concurrency`` as the rollout concurrency.

Prints episodes/s, latency, time spent waiting on the server per episode, and
the most sessions the server held at once next to the limit, and checks that
every episode ran exactly one session and came back exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, ClassVar

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("OPENREWARD_LOG_LEVEL", "ERROR")  # late keepalive pings of closed sessions warn

import attrs
from openreward.environments import Environment, TextBlock, ToolOutput, terminal, tool
from pydantic import BaseModel

from minds_core.contract.environment import Context, Task
from minds_openreward.environment import OpenRewardEnvironment, load_environment
from minds_openreward.local_server import serve

TASKS = 64
HOP = '<tool_call>{"name": "hop", "arguments": {"step": 1}}</tool_call>'


class Hop(BaseModel):
    step: int


class Answer(BaseModel):
    text: str


class Relay(Environment):
    """Pass the baton: call hop, then answer."""

    latency: ClassVar[float] = 0.0
    lock: ClassVar[threading.Lock] = threading.Lock()
    live: ClassVar[int] = 0
    peak: ClassVar[int] = 0
    sessions: ClassVar[Counter] = Counter()  # task id -> sessions created
    closed: ClassVar[int] = 0

    def __init__(self, task_spec: dict[str, Any], secrets: dict[str, str]) -> None:
        super().__init__(task_spec, secrets)
        with Relay.lock:
            Relay.live += 1
            Relay.peak = max(Relay.peak, Relay.live)
            Relay.sessions[task_spec["id"]] += 1

    def teardown(self) -> None:
        with Relay.lock:
            Relay.live -= 1
            Relay.closed += 1

    @classmethod
    def reset(cls, latency: float) -> None:
        cls.latency, cls.live, cls.peak, cls.closed, cls.sessions = latency, 0, 0, 0, Counter()

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{"id": i} for i in range(TASKS)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Relay {self.task_spec['id']}: call hop, then answer.")]

    @tool
    async def hop(self, params: Hop) -> ToolOutput:
        """Pass the baton."""
        await asyncio.sleep(self.latency)
        return ToolOutput(blocks=[TextBlock(text="passed")], reward=0.25)

    @terminal
    @tool
    async def answer(self, params: Answer) -> ToolOutput:
        """Finish."""
        await asyncio.sleep(self.latency)
        return ToolOutput(blocks=[TextBlock(text="done")], reward=1.0, finished=True)


@attrs.frozen
class Report:
    """The figures of one phase."""

    phase: str
    episodes: int
    returned: int
    failed: int
    seconds: float
    latencies: list[float]
    server_waits: list[float]
    limit: int
    peak_sessions: int
    sessions: Counter
    expected_sessions: Counter

    @property
    def per_second(self) -> float:
        return self.returned / self.seconds

    @property
    def exact(self) -> bool:
        """Every episode came back once, and ran exactly one session of its task."""
        return self.returned == self.episodes and self.sessions == self.expected_sessions

    def lines(self) -> list[str]:
        """Three lines of figures."""
        latency = ""
        if len(self.latencies) > 1:
            p95 = statistics.quantiles(self.latencies, n=20)[-1]
            latency = f"latency mean {_ms(self.latencies)}, p95 {1000 * p95:.1f} ms; "
        return [
            (
                f"[{self.phase}] {self.returned}/{self.episodes} episodes in {self.seconds:.2f} s = {self.per_second:.1f} episodes/s "
                f"({1000 * self.seconds / max(self.returned, 1):.1f} ms of wall time per episode), {self.failed} failed"
            ),
            f"[{self.phase}] {latency}waiting on the server per episode {_ms(self.server_waits)}",
            (
                f"[{self.phase}] most sessions open on the server: {self.peak_sessions} (limit {self.limit}); "
                f"exactly one session per episode: {'yes' if self.exact else 'NO'}"
            ),
        ]


def _ms(values: list[float]) -> str:
    return f"{1000 * statistics.fmean(values):.1f} ms"


def _expected(tasks: list[Task], episodes: int, per_task: int = 1) -> tuple[list[Task], Counter]:
    """The tasks to play (``per_task`` episodes each) and the sessions the server should see per task id."""
    chosen = [tasks[i % len(tasks)] for i in range(episodes // per_task)]
    return chosen, Counter({t.info["spec"]["id"]: 0 for t in chosen}) + Counter(t.info["spec"]["id"] for t in chosen for _ in range(per_task))


async def bridge_phase(env: OpenRewardEnvironment, tasks: list[Task], episodes: int, concurrency: int, phase: str = "bridge") -> Report:
    """Fixed actions, no model: the bridge's cost per episode."""
    chosen, expected = _expected(tasks, episodes)
    limiter = asyncio.Semaphore(concurrency)
    ctx = Context(sampler=None, tokenizer=None, service=None, renderer=None, base_model="none")

    async def one(task: Task) -> tuple[float, float]:
        async with limiter:
            began = time.perf_counter()
            episode = env.episode(task, ctx)
            try:
                await episode.initial_observation()
                await episode.step(HOP)
                await episode.step("baton delivered")
                metrics = episode.outcome().metrics
            finally:
                await episode.close()
            return time.perf_counter() - began, metrics["ors_seconds"]

    Relay.reset(Relay.latency)
    began = time.perf_counter()
    results = await asyncio.gather(*(one(t) for t in chosen), return_exceptions=True)
    seconds = time.perf_counter() - began
    done = [r for r in results if not isinstance(r, BaseException)]
    return Report(
        phase, episodes, len(done), len(results) - len(done), seconds,
        [r[0] for r in done], [r[1] for r in done], concurrency, Relay.peak, Counter(Relay.sessions), expected,
    )  # fmt: skip


async def rollout_phase(env: OpenRewardEnvironment, tasks: list[Task], episodes: int, concurrency: int, group_size: int) -> Report:
    """minds rollouts (run_group) with the local tiny model, ``concurrency`` rollouts at once."""
    from tinker import types

    from minds_core.backends.local import DEFAULT_BASE_MODEL, ServiceClient
    from minds_core.config import RolloutConfig
    from minds_core.envs.render import Renderer
    from minds_core.episodes.groups import EpisodeSettings
    from minds_core.episodes.rollout import run_group

    chosen, expected = _expected(tasks, episodes, group_size)
    with TemporaryDirectory() as checkpoints:
        service = ServiceClient(checkpoint_root=Path(checkpoints))
        sampler = await service.create_sampling_client(base_model=DEFAULT_BASE_MODEL)
        renderer = Renderer(sampler.get_tokenizer())
        ctx = Context(sampler=sampler, tokenizer=renderer.tokenizer, service=service, renderer=renderer, base_model=DEFAULT_BASE_MODEL)
        settings = EpisodeSettings(renderer, types.SamplingParams(max_tokens=8), RolloutConfig(retries=0, max_total_tokens=2048))
        limiter = asyncio.Semaphore(concurrency)
        Relay.reset(Relay.latency)
        began = time.perf_counter()
        groups = await asyncio.gather(
            *(run_group("relay", env, t, group_size, lambda: ctx, settings, limiter, group_size, i) for i, t in enumerate(chosen))
        )
        seconds = time.perf_counter() - began
    rollouts = [r for g in groups for r in g.rollouts]
    ok = [r for r in rollouts if r.ok]
    return Report(
        "rollouts", len(chosen) * group_size, len(rollouts), len(rollouts) - len(ok), seconds,
        [], [r.metrics["ors_seconds"] for r in ok], concurrency, Relay.peak, Counter(Relay.sessions), expected,
    )  # fmt: skip


def run_load(
    episodes: int, concurrency: int, group_size: int, tool_latency: float, phases: tuple[str, ...] = ("solo", "bridge", "rollouts")
) -> list[Report]:
    """Serve Relay, run the phases, return their reports ("solo": 20 bridge episodes one at a time)."""
    Relay.reset(tool_latency)
    reports = []
    with serve([Relay]) as url:
        env = load_environment(name="relay", base_url=url)
        tasks = env.tasks("train")

        async def run() -> None:
            if "solo" in phases:
                reports.append(await bridge_phase(env, tasks, min(20, episodes), 1, "solo"))
            if "bridge" in phases:
                reports.append(await bridge_phase(env, tasks, episodes, concurrency))
            if "rollouts" in phases:
                reports.append(await rollout_phase(env, tasks, episodes, concurrency, group_size))
            await env.close()

        asyncio.run(run())
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=200, help="rollouts (and so sessions) in flight at once")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--tool-latency", type=float, default=0.02, help="seconds each tool call takes on the server")
    parser.add_argument("--phase", choices=("solo", "bridge", "rollouts"), action="append", help="run only this phase (repeatable)")
    parser.add_argument("--smoke", action="store_true", help="8 episodes, 4 at once: checks the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.episodes, args.concurrency = 8, 4
    reports = run_load(args.episodes, args.concurrency, args.group_size, args.tool_latency, tuple(args.phase or ("solo", "bridge", "rollouts")))
    for report in reports:
        print("\n".join(report.lines()))


if __name__ == "__main__":
    main()

"""minds_calc_v1: a multi-turn verifiers v1 environment with a tool, written from verifiers 0.4's own API.

Its Env plays the user, as verifiers' textarena env does: the agent's first reply opens the exchange, and
each reply goes to the env's calculator tool (``calculate``: the sum of the integers in the text, or an
error when it has none), whose result comes back as the next user turn, for ``turns`` turns. The task's
rewards: ``used_tool``, the share of replies the tool could read, and ``even``, the share of its results
that are even; its metric ``turns`` counts the agent's replies.
"""

import re
from collections.abc import Iterator

import verifiers.v1 as vf

INTEGER = re.compile(r"-?\d+")


def calculate(text: str) -> str:
    """The calculator tool: the sum of the integers in ``text``, or why there is none."""
    numbers = [int(found) for found in INTEGER.findall(text)]
    return f"calculate: {sum(numbers)}" if numbers else "calculate: error: no integer in the reply"


class CalcConfig(vf.TasksetConfig):
    num_tasks: int = 4
    turns: int = 3


class CalcData(vf.TaskData):
    turns: int


class CalcTask(vf.Task[CalcData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def used_tool(self, trace: vf.Trace) -> float:
        results = trace.info.get("tool_results", [])
        return sum("error" not in result for result in results) / len(results) if results else 0.0

    @vf.reward(weight=1.0)
    async def even(self, trace: vf.Trace) -> float:
        results = trace.info.get("tool_results", [])
        return sum(result.endswith(("0", "2", "4", "6", "8")) for result in results) / len(results) if results else 0.0

    @vf.metric
    async def turns(self, trace: vf.Trace) -> float:
        return float(trace.info.get("replies", 0))


class CalcEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()


class CalcEnv(vf.Env[CalcEnvConfig]):
    async def run(self, task, agents):
        results: list[str] = []
        replies = 0
        async with agents.agent.interaction(task) as interaction:
            segment = await interaction.turn()
            replies += 1
            results.append(calculate(segment.last_reply))
            while not segment.terminated and replies < task.data.turns:
                segment = await interaction.turn(results[-1])
                replies += 1
                results.append(calculate(segment.last_reply))
            interaction.trace.info["tool_results"] = results
            interaction.trace.info["replies"] = replies


class CalcTaskset(vf.Taskset[CalcTask, CalcConfig]):
    def load(self) -> Iterator[CalcTask]:
        for i in range(self.config.num_tasks):
            prompt = f"Use the calculator: write numbers to add, such as {i} + {i + 2}."
            yield CalcTask(CalcData(id=f"calc-{i}", prompt=prompt, turns=self.config.turns), self.config.task)


__all__ = ["CalcEnv", "CalcTaskset"]

"""minds_sums_v1: a small verifiers v1 taskset (sums of two numbers), written from verifiers 0.4's own API.

One prompt per task, answered by the taskset's default agent (verifiers' null harness: a chat loop);
scored by the task's ``@vf.reward`` methods: ``correct`` (the sum appears in the reply, weight 1) and
``digits`` (the share of the reply's characters that are digits, weight 0.5), and the ``@vf.metric``
``reply_chars``. ``num_tasks`` and ``seed`` are its config (``[env.args.args]`` in minds).
"""

import random
from collections.abc import Iterator

import verifiers.v1 as vf


class SumsConfig(vf.TasksetConfig):
    num_tasks: int = 8
    seed: int = 0


class SumsData(vf.TaskData):
    answer: str


class SumsTask(vf.Task[SumsData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def correct(self, task: SumsData, trace: vf.Trace) -> float:
        return 1.0 if task.answer in trace.last_reply else 0.0

    @vf.reward(weight=0.5)
    async def digits(self, trace: vf.Trace) -> float:
        reply = trace.last_reply
        return sum(ch.isdigit() for ch in reply) / len(reply) if reply else 0.0

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class SumsTaskset(vf.Taskset[SumsTask, SumsConfig]):
    def load(self) -> Iterator[SumsTask]:
        rng = random.Random(self.config.seed)
        for i in range(self.config.num_tasks):
            a, b = rng.randint(1, 50), rng.randint(1, 50)
            data = SumsData(id=f"sum-{i}", prompt=f"{a}+{b}=", answer=str(a + b))
            yield SumsTask(data, self.config.task)


__all__ = ["SumsTaskset"]

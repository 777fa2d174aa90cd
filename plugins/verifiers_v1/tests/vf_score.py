"""verifiers' own scoring of given replies, for the tests (run with the verifiers interpreter, never minds').

``python vf_score.py SPEC`` with ``[[task index, reply], ...]`` on stdin prints each reply's ``trace.reward``
as verifiers scores it: the task's ``Task.score`` on a trace whose reply is that text.
"""

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "minds_verifiers_v1"))

import runner
import verifiers.v1 as vf


async def main() -> None:
    env = runner.load(json.loads(sys.argv[1]))
    tasks = list(env.taskset)
    rewards = []
    for index, reply in json.loads(sys.stdin.read()):
        trace = vf.Trace.model_construct(root_reply=reply)
        await tasks[index].score(trace)
        rewards.append(trace.reward)
    print(json.dumps(rewards))


asyncio.run(main())

"""A SingleTurnEnv in an older verifiers style: a plain-string `task` column, a monitor of `sampling_args`,
reward functions with odd parameters, and one that raises for rows marked `fail` (verifiers scores that 0)."""

import verifiers as vf
from datasets import Dataset


def tagged(task: str) -> float:
    """1 when the reward function receives the row's plain-string task label."""
    return float(task == "arithmetic")


def max_tokens_seen(state: vf.State) -> float:
    """The max_tokens in the sampling_args the rollout was given (a monitor)."""
    return float(state["sampling_args"]["max_tokens"])


def picky(_, completion, info, /) -> float:
    if info.get("fail"):
        raise ValueError("cannot score this reply")
    return float(bool(str(completion[-1]["content"] or "").strip()))


def load_environment(fail: bool = False) -> vf.SingleTurnEnv:
    rows = [{"question": f"What is {a} + {a}?", "answer": str(2 * a), "task": "arithmetic", "info": {"fail": fail}} for a in range(1, 5)]
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows),
        sampling_args={"temperature": 0.3, "extra_body": {"skip_special_tokens": False}},
        rubric=vf.Rubric(funcs=[tagged, picky, max_tokens_seen], weights=[1.0, 0.5, 0.0]),
    )

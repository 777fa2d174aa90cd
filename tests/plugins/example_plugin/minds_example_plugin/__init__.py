"""Example minds plugin (test fixture): an echo environment and a length reward."""

from minds_core import Rubric, SingleTurnEnvironment, Task, hookimpl


def shortness(completion: str) -> float:
    """1 for an empty reply, falling towards 0 as it grows."""
    return 1.0 / (1.0 + len(completion))


def load_echo(num_tasks: int = 4) -> SingleTurnEnvironment:
    """Say a word back; shorter replies score higher."""
    words = ["apple", "river", "stone", "cloud", "lamp", "seed"][:num_tasks]
    tasks = [Task(prompt=f"Say {w}.", answer=w, id=w) for w in words]
    return SingleTurnEnvironment({"train": tasks}, Rubric([shortness], names=["example.shortness"]))


@hookimpl
def minds_register_environments(register):
    register("echo_example", load_echo, description="say a word back (test fixture)")


@hookimpl
def minds_register_reward_functions(register):
    register("example.shortness", shortness, description="1 / (1 + characters)")


@hookimpl
def minds_register_advantage_estimators(register):
    register("example_sign", lambda rewards: [float((r > 0) - (r < 0)) for r in rewards], description="sign of the reward")

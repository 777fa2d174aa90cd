"""minds' own Environment contract (tasks + episode) from a module's load_environment, as the plugin docs write it."""

from minds_core import Rubric, SingleTurnEnvironment, StepResult, Task

WORDS = ("apple", "river", "stone", "cloud")


def shares_letters(completion: str, answer: str) -> float:
    return len(set(answer) & set(completion)) / len(set(answer))


class AskTwice:
    """Stepwise: the word is asked for, then asked again; the second reply is scored."""

    def __init__(self, task: Task) -> None:
        self.task, self.replies = task, 0

    async def initial_observation(self) -> list[dict]:
        return [{"role": "user", "content": self.task.prompt}]

    async def step(self, action: str) -> StepResult:
        self.replies += 1
        if self.replies == 1:
            return StepResult(reward=None, done=False, messages=[{"role": "user", "content": "Once more?"}])
        return StepResult(reward=shares_letters(action, self.task.answer), done=True)


class Twice:
    def tasks(self, split: str) -> list[Task]:
        if split != "train":
            raise KeyError(split)
        return [Task(prompt=f"Say {w}.", answer=w, id=w) for w in WORDS]

    def episode(self, task: Task, ctx: object) -> AskTwice:
        return AskTwice(task)


def load_environment(kind: str = "single_turn") -> object:
    if kind == "stepwise":
        return Twice()
    tasks = [Task(prompt=f"Say {w}.", answer=w, id=w) for w in WORDS]
    return SingleTurnEnvironment({"train": tasks}, Rubric([shares_letters], names=["words.shares_letters"]))

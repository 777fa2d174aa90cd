"""The ORS environments the bridge's tests serve (a real openreward.environments.Server on 127.0.0.1).

``ToolLab``: add numbers, peek, break things; a plain reply is the answer (terminal tool).
``Maze``: look and move; only tool calls count, nothing ends it but finding the exit.
``Catalog``: a thousand tasks served only by index; a plain reply is the answer.

conftest.py imports this module when a test first asks for a server: the ORS server SDK takes seconds to
import, which the workers that run no such test do not pay.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

from fastapi import HTTPException
from openreward.environments import Environment, TextBlock, ToolOutput, terminal, tool
from pydantic import BaseModel

from minds_openreward.local_server import serve

#: What the fake hosted service accepts as a valid OpenReward key.
HOSTED_KEY = "sk-or-test-5f1c0d9e"


class Amount(BaseModel):
    value: int


class Reply(BaseModel):
    text: str


class Direction(BaseModel):
    direction: str


class Census:
    """Live sessions of an environment class as the server sees them (constructor to teardown)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.live = self.peak = self.created = self.refused = self.torn_down = 0
        self.secrets: list[dict[str, str]] = []

    def enter(self, secrets: dict[str, str]) -> None:
        with self.lock:
            if self.capacity is not None and self.live >= self.capacity:
                self.refused += 1
                raise HTTPException(429, "maximum capacity reached", headers={"Retry-After": "0"})
            self.live += 1
            self.created += 1
            self.peak = max(self.peak, self.live)
            self.secrets.append(dict(secrets))

    def leave(self) -> None:
        with self.lock:
            self.live -= 1
            self.torn_down += 1


class Counted(Environment):
    """An environment whose sessions are counted in its class's census (each subclass has its own)."""

    census: ClassVar[Census]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.census = Census()

    def __init__(self, task_spec: dict[str, Any], secrets: dict[str, str]) -> None:
        super().__init__(task_spec, secrets)
        self.census.enter(secrets)

    def teardown(self) -> None:
        self.census.leave()

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]


class ToolLab(Counted):
    """Arithmetic lab: reach the target with add; answer in plain text."""

    def __init__(self, task_spec: dict[str, Any], secrets: dict[str, str]) -> None:
        super().__init__(task_spec, secrets)
        self.total = 0

    @staticmethod
    def answer_reward(text: str) -> float:
        """The terminal reward for a plain-text answer: its length in tens of characters, at most 4."""
        return min(len(text), 40) / 10

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "fragile"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        if split == "fragile":
            return [{"target": 0, "explode": True} for _ in range(2)]
        return [{"target": 3 + i} for i in range(4)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Reach {self.task_spec['target']} with add.")]

    @tool
    def add(self, params: Amount) -> ToolOutput:
        """Add a number to the total."""
        self.total += params.value
        return ToolOutput(blocks=[TextBlock(text=f"total={self.total}")], reward=0.5)

    @tool
    def peek(self) -> ToolOutput:
        """Show the target."""
        return ToolOutput(blocks=[TextBlock(text=f"target={self.task_spec['target']}")])

    @tool
    async def stall(self) -> ToolOutput:
        """Take a while."""
        await asyncio.sleep(3)
        return ToolOutput(blocks=[TextBlock(text="finally")])

    @tool
    def explode(self) -> ToolOutput:
        """Do not call this."""
        raise RuntimeError("the lab caught fire")

    @terminal
    @tool
    def answer(self, params: Reply) -> ToolOutput:
        """The final answer."""
        if self.task_spec.get("explode"):
            raise RuntimeError("the lab caught fire")
        return ToolOutput(blocks=[TextBlock(text="noted")], reward=self.answer_reward(params.text), finished=True)


class Maze(Counted):
    """A one-room maze: look around, move to the exit."""

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{"exit": "north"}, {"exit": "east"}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Find the exit.")]

    @tool
    def look(self) -> ToolOutput:
        """Look around."""
        return ToolOutput(blocks=[TextBlock(text=f"You see a door to the {self.task_spec['exit']}.")])

    @tool
    def move(self, params: Direction) -> ToolOutput:
        """Walk one way."""
        if params.direction == self.task_spec["exit"]:
            return ToolOutput(blocks=[TextBlock(text="You are out.")], reward=1.0, finished=True)
        return ToolOutput(blocks=[TextBlock(text="You bump into a wall.")], reward=-0.1)


class Catalog(Counted):
    """Tasks served only by index (too many to list): read the entry."""

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    @classmethod
    async def num_tasks(cls, split: str) -> int:
        return 1000

    @classmethod
    async def get_task(cls, split: str, index: int) -> dict[str, Any]:
        return {"entry": index}

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Read entry {self.task_spec['entry']}.")]

    @terminal
    @tool
    def answer(self, params: Reply) -> ToolOutput:
        """The final answer."""
        return ToolOutput(blocks=[TextBlock(text="ok")], reward=float(self.task_spec["entry"]), finished=True)


class HeaderLog:
    """ASGI middleware recording the X-API-Key header of every request (None when absent)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.keys: list[str | None] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            key = headers.get(b"x-api-key")
            self.keys.append(None if key is None else key.decode())
        await self.app(scope, receive, send)


class FakeHostedAuth(HeaderLog):
    """A fake of the hosted service's gate: 401 unless X-API-Key is HOSTED_KEY (then the real server answers)."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"x-api-key") != HOSTED_KEY.encode():
            from starlette.responses import PlainTextResponse

            await PlainTextResponse("invalid API key", status_code=401)(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


class Served:
    """A running server: its URL, the header log around it, and the environment classes it serves."""

    lab = ToolLab
    maze = Maze
    catalog = Catalog
    hosted_key = HOSTED_KEY

    def __init__(self, url: str, log: HeaderLog) -> None:
        self.url = url
        self.log = log


def serve_with(middleware: type[HeaderLog]) -> Iterator[Served]:
    """Serve ToolLab, Maze and Catalog on 127.0.0.1 behind ``middleware`` until the generator is closed."""
    logs: list[HeaderLog] = []

    def wrap(app: Any) -> HeaderLog:
        logs.append(middleware(app))
        return logs[-1]

    with serve([ToolLab, Maze, Catalog], wrap=wrap) as url:
        yield Served(url, logs[0])

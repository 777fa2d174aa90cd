"""A real ``minds serve`` in a subprocess on 127.0.0.1:0, and SDK clients pointed at it."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tinker

KEY = "tml-serve-test"


@dataclass
class Served:
    """A running server (``minds serve``, or another for comparison): its URL and process."""

    url: str
    process: subprocess.Popen[str]

    def stop(self) -> int:
        """SIGTERM, as a service manager would; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=300)  # a hang guard
        finally:
            if self.process.poll() is None:
                self.process.kill()


def start_server(
    tmp_path: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    memory_limit: int | None = None,
    open_files: int | None = None,
) -> Served:
    """``minds serve --port 0`` (a process boundary is the point: the SDK talks HTTP to it); waits for its URL line.

    ``memory_limit`` (bytes of address space) and ``open_files`` (descriptors) bound the server process, so
    that a request that makes it allocate without bound, or a flood of connections, shows as a failure."""
    argv = [sys.executable, "-m", "minds_core.cli.command", "serve", "--port", "0", "--checkpoint-root", str(tmp_path / "ckpt"), *extra]
    return launch(argv, env=env, memory_limit=memory_limit, open_files=open_files)


def launch(
    argv: list[str], env: dict[str, str] | None = None, memory_limit: int | None = None, open_files: int | None = None
) -> Served:
    """Start a server process that prints ``{"url": ...}`` as its first line of stdout (as ``minds serve`` does), bounded
    as ``start_server`` says; waits for that line."""

    def bound() -> None:
        if memory_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        preexec_fn=bound if memory_limit is not None or open_files is not None else None,  # noqa: PLW1509 - setrlimit only, no lock
    )
    line = process.stdout.readline() if process.stdout else ""
    if not line:
        process.kill()
        raise AssertionError(f"{argv[1:4]} printed no URL; stderr:\n{process.stderr.read() if process.stderr else ''}")
    return Served(json.loads(line)["url"], process)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for a test module, serving minds-tiny (what the tests name) and minds-small (the default; about a second)."""
    server = start_server(tmp_path_factory.mktemp("serve"), "--model", "minds-tiny", "--model", "minds-small")
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def service(served: Served) -> Iterator[tinker.ServiceClient]:
    """An unmodified SDK ``ServiceClient`` on the served URL."""
    client = tinker.ServiceClient(base_url=served.url, api_key=KEY)
    yield client
    client.close("success").result(timeout=30)


@pytest.fixture
def tokens() -> Callable[[int, int], list[int]]:
    """``n`` deterministic token ids of the tiny model's vocabulary (seeded)."""
    import random

    def make(n: int, seed: int = 0) -> list[int]:
        rng = random.Random(seed)
        return [rng.randrange(3, 250) for _ in range(n)]

    return make

"""A real Ray cluster on 127.0.0.1 for the tests: a head and a second node, each ``ray start --block`` in a
process group of its own, so that a test can kill one node and the fixture can stop exactly what it started."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")
#: The test environment, loaded by path on every node (all on this machine) through its ``load_environment``.
ENV = str(Path(__file__).resolve().parent / "envs" / "burn_env.py")
#: Node health checked every 0.5 s, dead after 3 misses: a killed node is noticed in seconds, not the default ~30.
HEALTH = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "0"}
#: Ray's token-authentication variables: the cluster decides (its head turns token mode on where it has a token).
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LocalCluster:
    """``head`` and ``second`` nodes with one CPU each; workers on a node see ``MINDS_TEST_NODE`` = its name.

    With Ray's default authentication, as README.md documents it: the head has a token (a file of this cluster's,
    named by ``RAY_AUTH_TOKEN_PATH``: ``~/.ray/auth_token`` is left alone), so ``ray start --head`` turns token
    authentication on; the second node joins with ``RAY_AUTH_MODE=token`` and the token; a driver has the token
    (``driver_env``) and nothing else."""

    def __init__(self) -> None:
        self.temp = tempfile.mkdtemp(prefix="mray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
        self.address = f"127.0.0.1:{_free_port()}"
        self.nodes: dict[str, subprocess.Popen] = {}
        token = Path(self.temp) / "auth_token"
        token.write_text(secrets.token_hex(32))
        self.driver_env = {"RAY_AUTH_TOKEN_PATH": str(token)}  #: what a driver of this cluster is given: the token

    def _env(self, **extra: str) -> dict[str, str]:
        return {**{k: v for k, v in os.environ.items() if k not in AUTH_VARIABLES}, **self.driver_env, **extra}

    def _start(self, name: str, *args: str) -> None:
        joining = {} if name == "head" else {"RAY_AUTH_MODE": "token"}  # the head decides; a joining node is told
        env = self._env(**HEALTH, **joining, MINDS_TEST_NODE=name)
        log = open(Path(self.temp) / f"{name}.log", "w")
        self.nodes[name] = subprocess.Popen(
            [RAY, "start", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats", *args],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def start(self) -> LocalCluster:
        port = self.address.rsplit(":", 1)[1]
        self._start("head", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={self.temp}", '--resources={"head": 1}')
        self._wait_for(1)
        self._start("second", f"--address={self.address}", '--resources={"second": 1}')
        self._wait_for(2)
        return self

    def join(self, name: str) -> None:
        """Start one more node (one CPU, the resource ``name``) and wait until it is alive."""
        self._start(name, f"--address={self.address}", f'--resources={{"{name}": 1}}')
        self._wait_for(len(self.nodes))

    def _wait_for(self, count: int, timeout: float = 240.0) -> None:
        """Until ``count`` nodes are alive (``ray status`` lists them), else RuntimeError with the nodes' logs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            command = [RAY, "status", f"--address={self.address}"]
            status = subprocess.run(command, capture_output=True, text=True, env=self._env(RAY_AUTH_MODE="token"), check=False)
            if status.returncode == 0 and status.stdout.count("node_") >= count:
                return
            for name, node in self.nodes.items():
                if node.poll() is not None:
                    raise RuntimeError(f"ray node {name} exited: {(Path(self.temp) / f'{name}.log').read_text()[-2000:]}")
            time.sleep(1)
        raise RuntimeError(f"{count} ray nodes not up after {timeout:g} s: {status.stdout[-1000:]} {status.stderr[-1000:]}")

    def kill(self, name: str) -> None:
        """SIGKILL a node's whole process group (its raylet, object store and workers): the node dies mid-work."""
        os.killpg(self.nodes[name].pid, signal.SIGKILL)
        self.nodes[name].wait()

    def stop(self) -> None:
        """SIGTERM each node this cluster started (ray start --block stops its own processes), then SIGKILL what is left."""
        for node in self.nodes.values():
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGTERM)
        for node in self.nodes.values():
            try:
                node.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(node.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

"""verifiers v1 bridge: train on verifiers 0.4 environments (a Taskset, its Harness, an Env) token-exactly.

Registers the ``verifiers_v1`` environment. verifiers 0.4 is not imported here: it runs in an
interpreter of its own (``[env.args] python``), where ``runner.py`` loads the environment once, lists its
tasks and plays each episode with verifiers' own runtime, its agents' model calls going to the run's
policy endpoint, for as long as the environment is held. The episodes are those of minds' ``harness``
environment (``minds_core``'s ``HarnessEnvironment``), its program a relay that asks the runner for one
episode: every call recorded token-exactly, its calls the trajectory trained, its reward and components
the relay's last line.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

from minds_core import ConfigError, HarnessArgs, HarnessEnvironment, Register, Task, arg, at_least, env_args, hookimpl, within

#: The file the verifiers interpreter runs (it imports verifiers, never minds).
RUNNER = Path(__file__).with_name("runner.py")
#: The interpreter used when neither ``[env.args] python`` nor this variable names one.
PYTHON_VARIABLE = "MINDS_VERIFIERS_PYTHON"
#: Where ``make verifiers-v1`` builds verifiers' own virtual environment (relative to the working directory).
DEFAULT_VENV = ".venv-verifiers"
#: What the runner's check needs: the harness programs' dependencies, fetched through uv on first use.
FIRST_USE = "the first use fetches each harness program's dependencies (openai, mcp, httpx, ...; about 61 MB) through uv"


@attrs.frozen
class V1Args:
    """The ``[env.args]`` of ``verifiers_v1``."""

    taskset: str = arg(doc="the verifiers taskset id: an importable module exporting one vf.Taskset (owner/name@v reads as name)")
    args: dict[str, Any] = arg({}, doc="the taskset's config fields (verifiers' --env.taskset.*)")
    harness: str = arg("", doc="the agents' harness id (null, bash, ...); default: the taskset's own, else null (a chat loop)")
    env: str = arg("", doc="a verifiers Env id to pair with the taskset; default: the taskset's own, else SingleAgentEnv")
    path: list[str] = arg([], doc="folders put first on the verifiers interpreter's import path (where a taskset module lies)")
    python: str = arg(
        "", doc=f"the interpreter that has verifiers>=0.4 and uv; default: ${PYTHON_VARIABLE}, else {DEFAULT_VENV}/bin/python"
    )
    local_runtime: bool = arg(
        False, doc="play a seat whose env asks for a sandbox runtime (docker, podman, modal, ...) on this machine anyway"
    )
    test_tasks: int = arg(0, at_least(0), doc="the last N tasks are the held-out split evaluation uses (0: evaluate on all)")
    check_timeout: float = arg(600.0, within(1.0, 3600.0), doc=f"seconds loading the environment may take ({FIRST_USE})")
    max_calls: int = arg(64, within(1, 100_000), doc="model calls one episode may make; past them it fails as flooding")


def interpreter(chosen: str) -> str:
    """The verifiers interpreter's path (ConfigError when there is none)."""
    python = chosen or os.environ.get(PYTHON_VARIABLE) or str(Path(DEFAULT_VENV) / "bin" / "python")
    if not Path(python).is_file():
        where = "env.args.python" if chosen else f"${PYTHON_VARIABLE}" if os.environ.get(PYTHON_VARIABLE) else "the default"
        raise ConfigError(
            f"verifiers_v1: no interpreter at {python!r} ({where}): it needs a Python with verifiers>=0.4 and uv; "
            "`make verifiers-v1` builds one in .venv-verifiers (see plugins/verifiers_v1/README.md)"
        )
    return str(Path(python).absolute())


class Runner:
    """``runner.py serve``: verifiers' environment loaded once in its own interpreter, playing the episodes relays ask
    for on a Unix socket in a folder of its own; it exits when ``close`` closes its stdin (or this process is gone)."""

    def __init__(self, python: str, spec: dict[str, Any], timeout: float) -> None:
        """Start it and wait for its task listing (``tasks``); ConfigError naming what it could not load, or when
        loading takes more than ``timeout`` seconds."""
        self.folder = Path(tempfile.mkdtemp(prefix="minds-verifiers-"))
        self.socket = str(self.folder / "runner.sock")
        self.log = self.folder / "runner.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [python, str(RUNNER), "serve", json.dumps(spec), self.socket],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # the run's Ctrl-C is the run's: it stops after a step, and closes this
            )
        try:
            self.tasks = self._listing(spec["taskset"], python, timeout)
        except BaseException:
            self.close(grace=0.0)
            raise

    def _listing(self, taskset: str, python: str, timeout: float) -> list[dict[str, Any]]:
        assert self.process.stdout is not None
        line, deadline = b"", time.monotonic() + timeout
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConfigError(
                    f"verifiers_v1: loading taskset {taskset!r} took more than check_timeout = {timeout:g} s ({FIRST_USE}): "
                    "check that the package index is reachable, or raise env.args.check_timeout"
                )
            if select.select([self.process.stdout], [], [], min(left, 0.5))[0]:
                chunk = os.read(self.process.stdout.fileno(), 1 << 20)
                if not chunk:  # it exited
                    lines = [text for text in self.log.read_text(errors="replace").splitlines() if text.strip()]
                    why = lines[-1] if lines else f"it exited with code {self.process.wait()}"
                    raise ConfigError(f"verifiers_v1: taskset {taskset!r} cannot be loaded by {python}: {why}")
                line += chunk
        return json.loads(line)["tasks"]

    def close(self, grace: float = 10.0) -> None:
        """Let it go (stdin closed: it leaves its episodes and exits), killed after ``grace`` seconds; its folder removed."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)  # its harness programs too
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class V1Environment(HarnessEnvironment):
    """The ``harness`` environment whose program is a relay to the environment's ``Runner``; closing it stops the runner."""

    def __init__(self, runner: Runner, args: HarnessArgs, tasks: dict[str, list[Task]]) -> None:
        super().__init__(args, tasks)
        self.runner = runner

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.runner.close()


def minds_task(listed: dict[str, Any], taskset: str) -> Task:
    """A minds Task of one listed verifiers task (its ``index`` is what the episode plays)."""
    return Task(
        listed["prompt"],
        listed["answer"],
        {"index": listed["index"], **listed["data"]},
        listed["id"] or f"{taskset}-{listed['index']}",
    )


def load_environment(**raw: Any) -> V1Environment:
    """The ``verifiers_v1`` environment (arguments: V1Args)."""
    chosen = env_args(V1Args, raw, env="verifiers_v1")
    python = interpreter(chosen.python)
    spec = {"taskset": chosen.taskset, "args": chosen.args, "harness": chosen.harness, "env": chosen.env,
            "path": [str(Path(folder).absolute()) for folder in chosen.path], "local_runtime": chosen.local_runtime}  # fmt: skip
    runner = Runner(python, spec, chosen.check_timeout)
    tasks = [minds_task(listed, chosen.taskset) for listed in runner.tasks]
    if not tasks:
        runner.close()
        raise ConfigError(f"verifiers_v1: taskset {chosen.taskset!r} lists no task")
    held = tasks[-chosen.test_tasks :] if chosen.test_tasks else tasks
    trained = tasks[: -chosen.test_tasks] if chosen.test_tasks and chosen.test_tasks < len(tasks) else tasks
    relay = HarnessArgs(command=[python, str(RUNNER), "relay", runner.socket], tasks="", max_calls=chosen.max_calls)
    return V1Environment(runner, relay, {"train": trained, "test": held})


@hookimpl
def minds_register_environments(register: Register) -> None:
    register("verifiers_v1", load_environment, "a verifiers 0.4 (v1) environment: args taskset = <vf taskset id>, args = {...}")


__all__ = ["Runner", "V1Args", "V1Environment", "load_environment"]

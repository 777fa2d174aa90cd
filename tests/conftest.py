"""Shared fixtures: fixture plugins installed with pip into private folders, and a `minds` runner."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from minds_core import hookimpl

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_PLUGINS = Path(__file__).parent / "plugins"


def copy_fixture_plugin(name: str, into: Path) -> Path:
    """A copy of the fixture plugin distribution tests/plugins/NAME in ``into``, without build leftovers.

    Tests import and build fixture plugins from copies only: nothing is written into the tree, and
    no ``*.egg-info`` left there by hand registers a plugin for the tests.
    """
    leftovers = shutil.ignore_patterns("*.egg-info", "build", "dist", "__pycache__")
    return Path(shutil.copytree(FIXTURE_PLUGINS / name, into / name, ignore=leftovers))


def pytest_configure(config: pytest.Config) -> None:
    """Make the toy fixture plugin importable by every test module (its environment classes are used directly).

    Tests in this process register it through the ``plugins`` fixture; tests of real processes install it
    with ``installed_plugin``.
    """
    folder = Path(tempfile.mkdtemp(prefix="minds-fixture-plugins-"))
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    sys.path.insert(0, str(copy_fixture_plugin("toy_plugin", folder)))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Keep the garbage collector off what collection left alive (torch, transformers and every test module, held
    until the session ends), and let it run less often: with Python's defaults, the collections of the fast
    subset's one process (which walk that whole heap) took about a sixth of its CPU time."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


@pytest.fixture(scope="session")
def fixture_plugin_copy(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``fixture_plugin_copy(NAME)``: a new copy of tests/plugins/NAME in a temporary folder, to import or build."""
    return lambda name: copy_fixture_plugin(name, tmp_path_factory.mktemp(f"src-{name}"))


@pytest.fixture(scope="session")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory, fixture_plugin_copy: Callable[[str], Path]) -> Callable[[str], Path]:
    """Install a fixture plugin distribution with pip into its own folder; returns the folder (built from a copy)."""
    cache: dict[str, Path] = {}

    def install(name: str) -> Path:
        if name not in cache:
            target = tmp_path_factory.mktemp(f"site-{name}")
            source = fixture_plugin_copy(name)
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                 "--target", str(target), str(source)],
                check=True,
                capture_output=True,
            )
            cache[name] = target
        return cache[name]

    return install


@pytest.fixture
def run_minds(installed_plugin: Callable[[str], Path], tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """Run `python -m minds_core.cli.command ARGS` with the given fixture plugins importable."""

    def run(args: Sequence[str], plugins: Sequence[str] = (), env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        paths = [str(installed_plugin(p)) for p in plugins]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
        environ["PYTHONPATH"] = os.pathsep.join([*paths, environ.get("PYTHONPATH", "")]).strip(os.pathsep)
        environ.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "minds_core.cli.command", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=environ,
            timeout=300,
        )

    return run


@pytest.fixture(scope="module")
def plugins():
    """The installed plugins plus the toy fixture plugin (tests/plugins/toy_plugin), registered in-process."""
    import minds_toy_plugin
    from minds_core.base import logs
    from minds_core.contract.plugins import load_plugins

    logs.configure("json", "warning")
    return load_plugins(extra=[("toy", minds_toy_plugin)])


@pytest.fixture
def any_args_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The id of a one-row seed-style environment whose loader takes any [env.args] (the working folder is tmp_path)."""
    module = "any_args_" + "".join(c if c.isalnum() else "_" for c in tmp_path.name)  # one module name per test
    (tmp_path / f"{module}.py").write_text(
        "from types import SimpleNamespace\n\n\ndef load_environment(**args):\n"
        "    return SimpleNamespace(dataset=[{'question': 'q'}], step=lambda text: {'reward': 0.0})\n"
    )
    monkeypatch.chdir(tmp_path)
    return f"./{module}.py"


async def _raise(error: BaseException) -> Any:
    raise error


class ScriptedTraining:
    """FAKE hosted training client: the real local one; its forward_backward call N first runs ``script.pop(N)``.

    An action that returns an exception makes that request raise it, as the SDK raises a service's error
    (``tinker.InternalServerError`` for a 503, ``tinker.BadRequestError`` for a 400); any other action (one that
    sends this process SIGINT, say) runs and the request goes on.
    """

    def __init__(self, client: Any, script: dict[int, Callable[[], Any]]) -> None:
        self.client, self.script, self.calls = client, script, 0

    def forward_backward(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        action = self.script.pop(self.calls, None)
        error = action() if action is not None else None
        if isinstance(error, BaseException):
            return _raise(error)
        return self.client.forward_backward(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


class ScriptedService:
    """FAKE hosted service over the local backend: scripted training clients; it records how it was opened and closed."""

    def __init__(self, service: Any, backend: ScriptedBackend) -> None:
        self.service, self.backend = service, backend

    def _scripted(self, client: Any) -> ScriptedTraining:
        self.backend.trainings.append(self.backend.training(client, self.backend.script))
        return self.backend.trainings[-1]

    async def create_lora_training_client(self, **kwargs: Any) -> ScriptedTraining:
        self.backend.started.append("new")
        return self._scripted(await self.service.create_lora_training_client(**kwargs))

    async def create_training_client_from_state_with_optimizer(self, path: str) -> ScriptedTraining:
        self.backend.started.append(path)
        return self._scripted(await self.service.create_training_client_from_state_with_optimizer(path))

    def close(self, status: str) -> Any:
        self.backend.closed.append(status)
        return self.service.close(status)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.service, name)


class ScriptedBackend:
    """A plugin registering ``scripted``, the FAKE hosted service (the hosted one cannot be reached from here)."""

    Training = ScriptedTraining  #: the class to subclass for a training client that fails otherwise

    def __init__(self, script: dict[int, Callable[[], Any]], training: type[ScriptedTraining] = ScriptedTraining) -> None:
        self.script = script  #: forward_backward call number (of each training client) -> what it does first
        self.training = training  #: the kind of training client its services start
        self.started: list[str] = []  #: "new", or the state a training client was restored from
        self.trainings: list[ScriptedTraining] = []  #: every training client made, in order
        self.closed: list[str] = []  #: the statuses the services were closed with

    @hookimpl
    def minds_register_backends(self, register: Any) -> None:
        from minds_core.backends import create_local_service

        register("scripted", lambda config, run_dir: ScriptedService(create_local_service(config, run_dir), self), "FAKE hosted service")


@pytest.fixture
def scripted_backend() -> type[ScriptedBackend]:
    """``scripted_backend(script)``: a plugin whose ``scripted`` backend is the local one behind ``ScriptedService``."""
    return ScriptedBackend

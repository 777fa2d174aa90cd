"""Where an ``[env] id`` leads: distribution-project folders, installed distributions, and registered names that shadow yours."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from minds_core.base.errors import ConfigError
from minds_core.config import EnvConfig
from minds_core.contract.plugins import load_plugins
from minds_core.envs.loading import build_environment, warn_if_shadowing
from minds_core.envs.loose import LooseEnvironment, load_loose_environment

ENVIRONMENT = '''
from types import SimpleNamespace


def says(completion: str) -> float:
    return float("{word}" in completion)


def load_environment():
    return SimpleNamespace(dataset=[{{"question": "Say {word}."}}], rubric=SimpleNamespace(funcs=[says], weights=[1.0]))
'''


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty checkout as the current directory; sys.path and the modules it imports are restored afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        module = sys.modules[name]
        if str(tmp_path) in str(getattr(module, "__file__", "") or getattr(module, "__path__", "")):
            del sys.modules[name]


def _prompt(env: LooseEnvironment) -> str:
    return env.tasks("train")[0].prompt


@pytest.mark.parametrize(
    ("files", "word"),
    [
        ({"pyproject.toml": '[project]\nname = "Word-Game"\n', "word_game/__init__.py": ENVIRONMENT}, "nested"),
        ({"pyproject.toml": '[project]\nname = "word_game"\n', "src/word_game/__init__.py": ENVIRONMENT}, "src"),
        ({"pyproject.toml": '[project]\nname = "word-game"\n', "word_game.py": ENVIRONMENT}, "single"),
        ({"README.md": "# no pyproject", "word_game/__init__.py": ENVIRONMENT}, "by-folder-name"),
        ({"pyproject.toml": '[project]\nname = "Word-Game"\n', "Word_Game/__init__.py": ENVIRONMENT}, "case-kept"),
    ],
)
def test_a_distribution_project_folder_finds_its_package(workdir: Path, files: dict[str, str], word: str) -> None:
    for name, text in files.items():
        _write(workdir / "environments" / "word_game" / name, text.format(word=word))
    env = load_loose_environment("./environments/word_game", {})
    assert _prompt(env) == f"Say {word}."


def test_an_installed_distribution_loads_by_its_name(workdir: Path) -> None:
    site = workdir / "site"
    _write(site / "riddles_impl" / "__init__.py", ENVIRONMENT.format(word="installed"))
    _write(site / "my_riddles-0.1.0.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: my-riddles\nVersion: 0.1.0\n")
    _write(site / "my_riddles-0.1.0.dist-info" / "top_level.txt", "riddles_impl\n")
    sys.path.insert(0, str(site))
    registry = load_plugins().registry
    env = build_environment(EnvConfig(id="my-riddles"), registry)
    assert isinstance(env, LooseEnvironment) and _prompt(env) == "Say installed."
    with pytest.raises(ConfigError, match="unknown environment"):
        build_environment(EnvConfig(id="my-ridles"), registry)


def test_a_registered_name_shadowing_your_package_warns_and_module_prefix_picks_yours(workdir: Path) -> None:
    site = workdir / "site"
    _write(site / "ghost_trace" / "__init__.py", ENVIRONMENT.format(word="mine"))
    _write(workdir / "environments" / "ghost_trace" / "pyproject.toml", '[project]\nname = "ghost-trace"\n')
    sys.path.insert(0, str(site))
    registry = load_plugins().registry
    with capture_logs() as logs:
        theirs = build_environment(EnvConfig(id="ghost_trace", args={"num_examples": 4}), registry)
    assert not isinstance(theirs, LooseEnvironment)  # minds' plugin, as before
    [warning] = [e for e in logs if e["log_level"] == "warning"]
    assert "plugin 'ghost_trace'" in warning["event"] and str(site / "ghost_trace") in warning["event"]
    assert "./environments/ghost_trace" in warning["event"] and 'id = "module:ghost_trace"' in warning["event"]

    with capture_logs() as logs:
        mine = build_environment(EnvConfig(id="module:ghost_trace"), registry)
    assert isinstance(mine, LooseEnvironment) and _prompt(mine) == "Say mine."
    assert not [e for e in logs if e["log_level"] == "warning"]


@pytest.mark.slow
def test_a_registered_name_without_a_namesake_does_not_warn(workdir: Path) -> None:
    registry = load_plugins().registry
    with capture_logs() as logs:
        build_environment(EnvConfig(id="ghost_trace", args={"num_examples": 4}), registry)
        for entry in registry.entries("environments"):  # `verifiers`, `openreward`: packages their plugins require
            warn_if_shadowing(entry)
    assert not [e for e in logs if e["log_level"] == "warning"]


def test_a_project_folder_without_a_package_lists_where_it_looked(workdir: Path) -> None:
    _write(workdir / "environments" / "empty" / "pyproject.toml", '[project]\nname = "empty-env"\n')
    with pytest.raises(ConfigError) as raised:
        load_loose_environment("./environments/empty", {})
    message = str(raised.value)
    for where in ("empty_env/__init__.py", "src/empty_env/__init__.py", "empty_env.py", "src/empty/__init__.py"):
        assert where in message

"""The suite collects the project's own tests: a plugin a user makes under plugins/ (as the README shows) is not part of it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _testpaths() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]


def test_testpaths_are_the_tests_folder_and_the_committed_plugins() -> None:
    paths = _testpaths()
    assert paths[0] == "tests" and all(p.startswith("plugins/") and (ROOT / p / "pyproject.toml").is_file() for p in paths[1:])


@pytest.mark.slow
def test_a_user_plugin_folder_under_plugins_is_not_collected(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    for path in _testpaths():
        (tmp_path / path).mkdir(parents=True)
        (tmp_path / path / "test_own.py").write_text("def test_own():\n    pass\n")
    scratch = tmp_path / "plugins" / "capitals" / "tests"
    scratch.mkdir(parents=True)
    (scratch / "test_capitals.py").write_text("def test_users_own():\n    raise AssertionError('collected')\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "-o", "addopts=--import-mode=importlib"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_own" in done.stdout and "test_users_own" not in done.stdout

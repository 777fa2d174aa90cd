"""Installing the distribution adds ghost_trace to `minds envs`; uninstalling makes `minds run` fail clearly.

This test really runs ``pip uninstall`` on the current environment and always
reinstalls (editable) in a ``finally`` block; a file lock keeps two test sessions
on one machine from interleaving their uninstall/reinstall.
"""

import fcntl
import importlib.metadata
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

DISTRIBUTION = "minds-plugin-ghost-trace"
PLUGIN_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = PLUGIN_DIR.parents[1]


def _minds(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "minds_core.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=120)


def _pip(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"pip {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"


def _environments(cwd: Path) -> dict[str, str | None]:
    result = _minds("envs", "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return {row["name"]: row["distribution"] for row in json.loads(result.stdout)}


@contextmanager
def _uninstalled(distribution: str, source: Path) -> Iterator[None]:
    lock_path = Path(tempfile.gettempdir()) / f"{distribution}-reinstall.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            _pip("uninstall", "-y", distribution)
            yield
        finally:
            constraints = REPO_ROOT / "constraints.txt"
            _pip("install", "-q", "-c", str(constraints), "--no-deps", "--no-build-isolation", "-e", str(source))


def test_uninstall_removes_the_environment_and_reinstall_restores_it(tmp_path: Path) -> None:
    try:
        importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{DISTRIBUTION} is not installed: pip install -e {PLUGIN_DIR}")
    assert _environments(tmp_path).get("ghost_trace") == DISTRIBUTION

    with _uninstalled(DISTRIBUTION, PLUGIN_DIR):
        assert "ghost_trace" not in _environments(tmp_path)
        result = _minds("run", "--env", "ghost_trace", "--backend", "local", "--set", f"runs_dir={tmp_path}", cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        message = result.stderr
        assert "unknown environment 'ghost_trace'" in message
        assert "Available:" in message
        for other in _environments(tmp_path):
            assert other in message
        assert DISTRIBUTION not in message  # an uninstalled distribution declares nothing: no hint
        assert "Traceback" not in message

    assert _environments(tmp_path).get("ghost_trace") == DISTRIBUTION
